"""The shell examples of the README and of the manual's pages on accounts and prompting, run as
written, top to bottom, against the stand-in: a newcomer who follows them meets no error the
pages did not predict."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import assert_no_key_material, make_key

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The README's front page, as a newcomer runs it after installing: a first routed answer, then
# one screen each on accounts, budgets and spend (installation, the quick start, Datasette and the
# development commands are exercised elsewhere).
FRONT_PAGE = [("README.md", heading) for heading in ("## A first routed answer", "## Accounts", "## Budgets", "## Spend")]
# The examples the manual gives for declaring accounts and prompting, in its order (the stand-in's
# own two-terminal example and the benchmarks are exercised elsewhere).
MANUAL = [
    ("docs/accounts.md", "## Declaring accounts"),
    ("docs/accounts.md", "### Per-client caps"),
    ("docs/prompting.md", "# Prompting"),
]
KEY_ENVS = ("ANTHROPIC_WORK_KEY", "ANTHROPIC_PERSONAL_KEY", "ANTHROPIC_SHARED_KEY")


def bash_blocks(page, heading):
    """The ```bash blocks from ``heading`` to the next heading of any level (a block setting a
    variable with ``export`` shows a form, not a step)."""
    text = (ROOT / page).read_text()
    body = re.split(r"^" + re.escape(heading) + r"$", text, maxsplit=1, flags=re.M)[1]
    body = re.split(r"\n#{1,4} ", body)[0]
    return [block for block in re.findall(r"```bash\n(.*?)```", body, re.S) if not block.startswith("export ")]


@pytest.mark.parametrize("page, heading", FRONT_PAGE + MANUAL, ids=lambda value: str(value))
def test_each_section_has_examples_to_run(page, heading):
    assert bash_blocks(page, heading)


@pytest.fixture
def newcomer(tmp_path):
    """A fresh llm user directory whose key store holds the examples' three keys, and the stand-in."""
    from llm_accounts.standin import StandIn

    keys = {name: make_key() for name in KEY_ENVS}
    user_dir = tmp_path / "llm"
    user_dir.mkdir()
    (user_dir / "keys.json").write_text(json.dumps(keys))
    config = {"keys": [{"label": name.lower(), "key": key} for name, key in keys.items()]}
    with StandIn(config) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_", "LLM_"))}
        env.update(
            PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
            LLM_USER_PATH=str(user_dir),
            LLM_ACCOUNTS_BASE_URL=server.base_url,
            LLM_ACCOUNTS_LEDGER=str(tmp_path / "ledger.db"),
        )
        yield env, keys, server


def run_sections(sections, env, keys, cwd):
    """Run each section's blocks in order; ``llm keys set NAME`` is given the key at its prompt,
    as a user pastes it. Returns everything printed."""
    output = ""
    for page, heading in sections:
        for block in bash_blocks(page, heading):
            pasted = re.search(r"^llm keys set (\w+)", block, re.M)
            result = subprocess.run(
                ["bash", "-e", "-c", block], env=env, cwd=cwd, capture_output=True, text=True,
                input=keys[pasted.group(1)] + "\n" if pasted else "",
            )
            output += result.stdout + result.stderr
            assert result.returncode == 0, f"{page} {heading}: {result.stderr.strip().splitlines()[-1:]}"
    return output


def answered(server):
    return [r for r in server.requests if r["path"] == "/v1/messages" and r["status"] == 200]


def test_the_readme_front_page_runs_as_written(newcomer, tmp_path):
    env, keys, server = newcomer
    output = run_sections(FRONT_PAGE, env, keys, tmp_path)
    assert len(answered(server)) == 2  # the first routed answer, and the small-budget prompt
    for key in keys.values():
        assert_no_key_material(output, key)


def test_the_manual_examples_run_as_written(newcomer, tmp_path):
    env, keys, server = newcomer
    output = run_sections(MANUAL, env, keys, tmp_path)
    assert len(answered(server)) == 6  # one client-capped prompt, one for alice, four in Prompting
    for key in keys.values():
        assert_no_key_material(output, key)


def test_the_per_client_caps_examples_keep_the_restricted_account_restricted(newcomer, tmp_path):
    """Adding a token cap, as docs/accounts.md does, keeps --clients-only and the other clients' caps."""
    env, keys, server = newcomer
    for block in bash_blocks("docs/accounts.md", "### Per-client caps"):
        block = "\n".join(line for line in block.splitlines() if not line.startswith(("LLM_ACCOUNTS_CLIENT=", "llm -m")))
        result = subprocess.run(["bash", "-e", "-c", block], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    [shared] = json.loads((pathlib.Path(env["LLM_USER_PATH"]) / "accounts.json").read_text())["accounts"]
    assert shared["clients_only"] is True
    assert shared["clients"]["alice@example.com"] == {"budget_usd": "20.00"}
    assert shared["clients"]["ci-bot"] == {"budget_usd": "3.00", "tokens": 2000000}
