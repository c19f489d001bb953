"""The README's shell examples, run as written, top to bottom, against the stand-in: a newcomer who
follows them meets no error the README did not predict."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import assert_no_key_material, make_key

README = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
# The examples a newcomer runs against their accounts, in README order (installation, the
# stand-in's own two-terminal example and the benchmarks are exercised elsewhere).
SECTIONS = ("## Declaring accounts", "### Per-client caps", "## Prompting")
KEY_ENVS = ("ANTHROPIC_WORK_KEY", "ANTHROPIC_PERSONAL_KEY", "ANTHROPIC_SHARED_KEY")


def bash_blocks(heading):
    body = README.split("\n" + heading + "\n")[1]
    body = re.split(r"\n#{2,3} ", body)[0]
    return [block for block in re.findall(r"```bash\n(.*?)```", body, re.S) if not block.startswith("export ")]


def test_each_section_has_examples_to_run():
    assert all(bash_blocks(heading) for heading in SECTIONS)


@pytest.fixture
def newcomer(tmp_path):
    """A fresh llm user directory whose key store holds the README's three keys, and the stand-in."""
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


def test_the_readme_examples_run_as_written(newcomer, tmp_path):
    env, keys, server = newcomer
    output = ""
    for heading in SECTIONS:
        for block in bash_blocks(heading):
            result = subprocess.run(
                ["bash", "-e", "-c", block], env=env, cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL
            )
            output += result.stdout + result.stderr
            assert result.returncode == 0, f"{heading}: {result.stderr.strip().splitlines()[-1:]}"
    answered = [r for r in server.requests if r["path"] == "/v1/messages" and r["status"] == 200]
    assert len(answered) == 6  # one client-capped prompt, one for alice, four in Prompting
    for key in keys.values():
        assert_no_key_material(output, key)


def test_the_per_client_caps_examples_keep_the_restricted_account_restricted(newcomer, tmp_path):
    """Adding a token cap, as the README does, keeps --clients-only and the other clients' caps."""
    env, keys, server = newcomer
    for block in bash_blocks("### Per-client caps"):
        block = "\n".join(line for line in block.splitlines() if not line.startswith(("LLM_ACCOUNTS_CLIENT=", "llm -m")))
        result = subprocess.run(["bash", "-e", "-c", block], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    [shared] = json.loads((pathlib.Path(env["LLM_USER_PATH"]) / "accounts.json").read_text())["accounts"]
    assert shared["clients_only"] is True
    assert shared["clients"]["alice@example.com"] == {"budget_usd": "20.00"}
    assert shared["clients"]["ci-bot"] == {"budget_usd": "5.00", "tokens": 2000000}
