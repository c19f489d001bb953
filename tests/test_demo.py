"""scripts/demo (llm accounts demo) shows each thing the product is for, as a user would type it."""

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner
from llm.cli import cli

# A newcomer's shell after the quick start: .venv is not activated, so no llm on PATH.
NO_LLM_PATH = os.pathsep.join(
    folder for folder in os.environ.get("PATH", "").split(os.pathsep)
    if folder and not os.path.exists(os.path.join(folder, "llm"))
)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's output, and the directory it was started in.

    One run serves every test: with --keep its output is the plain demo's plus what it kept (the
    demo takes a dozen real llm processes, CI's slowest file)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", NO_LLM_PATH)
        result = CliRunner().invoke(cli, ["accounts", "demo", "--keep"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    kept = re.search(r"^Kept (\S+)\. To look around:", result.output, re.M)
    yield result.output, os.getcwd()
    if kept:
        shutil.rmtree(kept.group(1), ignore_errors=True)


@pytest.fixture
def demo_output(demo_run):
    return demo_run[0]


def commands(output):
    return [line[2:] for line in output.splitlines() if line.startswith("$ ")]


def test_commands_are_shown_as_a_user_types_them(demo_output):
    assert commands(demo_output) and all(command.startswith("llm ") for command in commands(demo_output))
    assert not any("/" in command.split()[0] for command in commands(demo_output))


def test_two_conversations_land_on_two_accounts_and_a_continued_one_stays(demo_output):
    accounts = re.findall(r"^# -> account (\w+):", demo_output, re.M)
    assert accounts[0] == accounts[1]  # llm -c stays on its account
    assert accounts[2] != accounts[0]  # the next new conversation goes to the other one


def test_a_429_moves_a_new_conversation_and_llm_logs_shows_both_attempts(demo_output):
    routing = demo_output.split("$ llm logs -n 1 --json")[1]
    assert re.search(r'"outcome": "rate_limited".*"outcome": "complete"', routing, re.S)


def test_a_budget_refusal_is_one_line_and_a_lower_max_tokens_fits(demo_output):
    [line] = [l for l in demo_output.splitlines() if l.startswith("Error: budget_exhausted: account 'tiny'")]
    assert "cannot take this prompt: its ceiling (up to $0.36)" in line
    assert "-> account tiny: reserved $0.205" in demo_output


def test_the_ceiling_against_the_cost_is_explained_once(demo_output):
    assert demo_output.count("The reservation is the worst case") == 1


def test_it_ends_with_status_and_what_to_try_next(demo_output):
    assert "$ llm accounts status" in demo_output
    assert "llm accounts demo --browse" in demo_output.split("# What to try next:")[1]


def next_steps(output):
    return [line.strip() for line in output.split("# What to try next:")[1].splitlines() if line.startswith("  ")]


def test_what_to_try_next_runs_as_printed_without_llm_on_path(demo_run):
    """After the quick start llm is in .venv, not on PATH: the suggested commands still work."""
    output, started_in = demo_run
    [prices] = [line for line in next_steps(output) if " accounts prices" in line]
    command = prices.split("  ")[0]
    env = {**os.environ, "PATH": NO_LLM_PATH}
    result = subprocess.run(
        ["bash", "-c", command], env=env, cwd=started_in, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr
    assert "claude-haiku-4-5" in result.stdout


def test_what_to_try_next_offers_no_command_on_the_demo_ledger_it_deletes(demo_output):
    # Issue 33, point 4: 'llm accounts browse --open' came first, on a ledger already deleted
    # (it opened the user's own instead, or failed). The dashboard is offered through the demo.
    steps = [line.split("  ")[0] for line in next_steps(demo_output.split("\nKept ")[0])]
    assert steps[0].endswith(" accounts demo --browse")
    assert not any(re.search(r" accounts (browse|status|attempts)\b", step) for step in steps)


def test_what_to_try_next_says_how_to_put_llm_on_path(demo_run):
    output, started_in = demo_run
    activate = os.path.join(os.path.dirname(sys.executable), "activate")
    assert "source " + os.path.relpath(activate, started_in) in output.split("# What to try next:")[1]


def test_what_to_try_next_says_plain_llm_when_it_is_on_path(monkeypatch):
    from llm_accounts import demo

    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + NO_LLM_PATH)
    assert demo.llm_command() == ("llm", None)


def test_browse_without_datasette_is_refused_before_the_demo_starts(monkeypatch):
    from llm_accounts import browse

    monkeypatch.setattr(browse, "datasette_installed", lambda: False)
    result = CliRunner().invoke(cli, ["accounts", "demo", "--browse"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "Datasette is not installed" in result.output and "llm install" in result.output


# scripts/demo, with stand-ins for .venv's python and llm that record how they were called


@pytest.fixture
def checkout(tmp_path):
    """A copy of scripts/demo in a checkout whose .venv/bin/python records its arguments and
    knows llm_accounts (and Datasette) only once pip installed them."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "scripts", "demo"), root / "scripts" / "demo")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = root / "calls.log"
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        f'echo "python $*" >> "{log}"\n'
        'case "$*" in\n'
        f'  *"-m pip install"*) touch "{root}/installed"; case "$*" in *datasette*) touch "{root}/datasette";; esac;;\n'
        f'  *"import llm_accounts, datasette"*) [ -e "{root}/datasette" ] || exit 1;;\n'
        f'  *"import llm_accounts"*) [ -e "{root}/installed" ] || exit 1;;\n'
        "esac\n"
    )
    (bin_dir / "llm").write_text(f'#!/bin/sh\necho "llm $*" >> "{log}"\n')
    for name in ("python", "llm"):
        (bin_dir / name).chmod(0o755)
    return root, log


def run_script(root, *args, cwd=None):
    return subprocess.run(
        ["bash", str(root / "scripts" / "demo"), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=cwd
    )


def test_scripts_demo_says_what_it_is_doing_before_the_first_install(checkout):
    root, log = checkout
    result = run_script(root)
    assert result.returncode == 0, result.stderr
    first = (result.stdout + result.stderr).splitlines()[0]
    assert first.startswith("scripts/demo: installing llm-accounts into .venv")
    pip = [line for line in log.read_text().splitlines() if "-m pip install" in line]
    assert pip and "--quiet" not in pip[0]  # pip's own progress shows
    assert log.read_text().splitlines()[-1] == "llm accounts demo"


def test_scripts_demo_browse_installs_datasette_too(checkout):
    root, log = checkout
    result = run_script(root, "--browse")
    assert result.returncode == 0, result.stderr
    [pip] = [line for line in log.read_text().splitlines() if "-m pip install" in line]
    assert pip.endswith(f"-e {root}[datasette]")
    assert log.read_text().splitlines()[-1] == "llm accounts demo --browse"


def test_scripts_demo_runs_the_demo_where_it_was_started(checkout, tmp_path):
    """So the paths the demo prints (such as .venv/bin/llm) are right from the user's directory."""
    root, log = checkout
    (root / "installed").touch()
    (root / ".venv" / "bin" / "llm").write_text(f'#!/bin/sh\npwd >> "{log}"\n')
    assert run_script(root, cwd=tmp_path).returncode == 0
    assert log.read_text().splitlines()[-1] == str(tmp_path)


def test_kept_demo_accounts_can_be_prompted_again_as_printed(demo_run):
    """--keep says how to serve the demo's own keys again: a plain stand-in makes other keys, and
    their 401 would block the demo accounts."""
    output, started_in = demo_run  # the printed commands are relative to where the demo ran
    assert re.search(r"^Kept (\S+)\. To look around:", output, re.M)
    lines = [line.strip() for line in output.split("To look around:")[1].splitlines() if line.startswith("  ")]
    look, _, serve, point, prompt = lines
    with socket.socket() as probe:  # the printed port may be taken on a shared machine
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve, point = (line.replace(":8765", f":{port}").replace("--port 8765", f"--port {port}") for line in (serve, point))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_", "LLM_USER"))}
    server = subprocess.Popen(
        ["bash", "-c", "exec " + serve], env=env, cwd=started_in, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout.readline().strip() == f"http://127.0.0.1:{port}"
        again = subprocess.run(
            ["bash", "-e", "-c", "\n".join((look, point, prompt))],
            env=env, cwd=started_in, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert again.returncode == 0, again.stderr
    assert "Stand-in reply to: Hello again" in again.stdout
