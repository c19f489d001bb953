"""Every file the plugin reads is a regular file of bounded size, or one coded line naming the
file and what is wrong (docs/security.md "Files read"): a FIFO never hangs a prompt, a link to
/dev/zero is never read until memory runs out."""

import json
import os
import resource
import subprocess
import sys

import pytest

from llm_accounts import catalog, paths
from llm_accounts.declarations import Account, read_accounts_file, read_dotenv, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.money import NANO
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

LIVENESS_S = 60  # a guard against hanging forever, not a timing assertion
MEMORY_CAP = 512 * 1024 * 1024
HAS_FIFO = hasattr(os, "mkfifo")
needs_fifo = pytest.mark.skipif(not HAS_FIFO or not os.path.exists("/dev/zero"), reason="needs FIFOs and /dev/zero")


def unbounded(path, kind):
    """Make ``path`` a FIFO nobody writes to, a link to /dev/zero, a directory, or a regular file
    one byte over the bound (sparse: it takes no space)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        with open(path, "wb") as file:
            file.truncate(paths.MAX_READ_BYTES + 1)


KINDS = ["fifo", "zero", "directory", "oversized"]
WHAT = {
    "fifo": "is not a regular file",
    "zero": "is not a regular file",
    "directory": "is not a regular file",
    "oversized": "is larger than 1 MiB",
}


def capped():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def llm_process(*args, cwd):
    """``llm ARGS`` as a real process, under a memory cap and a liveness bound."""
    return subprocess.run(
        [sys.executable, "-m", "llm", *args], cwd=cwd, capture_output=True, text=True, timeout=LIVENESS_S,
        preexec_fn=capped,
    )


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_read_limited_refuses_what_is_not_a_bounded_regular_file(tmp_path, kind):
    path = tmp_path / "file"
    unbounded(path, kind)
    with pytest.raises(paths.FileProblem) as caught:
        paths.read_limited(path)
    assert caught.value.reason.startswith(WHAT[kind])


def test_read_limited_reads_a_file_at_the_bound_and_a_missing_one_is_missing(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"x" * paths.MAX_READ_BYTES)
    assert len(paths.read_limited(path)) == paths.MAX_READ_BYTES
    with pytest.raises(FileNotFoundError):
        paths.read_limited(tmp_path / "missing")


@needs_fifo
@pytest.mark.parametrize("filename", [".env", ".env.local"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_dotenv_that_is_a_fifo_or_dev_zero_is_one_coded_line_for_a_routed_prompt(
    user_path, ledger_path, tmp_path, canary_key, filename, kind
):
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 5 * NANO)], None)
    unbounded(tmp_path / "work" / filename, kind)
    result = llm_process("-m", "claude-routed", "hi", cwd=tmp_path / "work")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: declaration_invalid: {filename}: is not a regular file (a FIFO, device or directory); "
        f"make {filename} a plain file or remove it"
    ]


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_an_unbounded_dotenv_is_declaration_invalid(tmp_path, kind):
    unbounded(tmp_path / ".env", kind)
    with pytest.raises(AccountsError) as caught:
        read_dotenv(tmp_path / ".env")
    assert caught.value.code == "declaration_invalid"
    assert str(caught.value).startswith(f"declaration_invalid: .env: {WHAT[kind]}")


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_an_unbounded_accounts_json_is_declaration_invalid(user_path, kind):
    unbounded(user_path / "accounts.json", kind)
    with pytest.raises(AccountsError) as caught:
        read_accounts_file()
    assert caught.value.code == "declaration_invalid"
    assert str(caught.value).startswith(f"declaration_invalid: accounts.json: {WHAT[kind]}")


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_an_unbounded_llm_keys_json_is_credential_lookup_failed(user_path, kind):
    from llm_accounts.declarations import load_declaration
    from llm_accounts.keys import resolve_key

    save_accounts_file([Account("alpha", "ALPHA_KEY", 5 * NANO)], None)
    unbounded(user_path / "keys.json", kind)
    with pytest.raises(AccountsError) as caught:
        resolve_key("ALPHA_KEY", load_declaration())
    assert caught.value.code == "credential_lookup_failed"
    assert f"llm's keys.json {WHAT[kind]}" in str(caught.value)


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "zero", "oversized"])
def test_an_unbounded_model_list_file_is_declaration_invalid(user_path, kind, monkeypatch):
    monkeypatch.setattr(catalog, "MAX_FILE_BYTES", paths.MAX_READ_BYTES)
    unbounded(user_path / "accounts-models.json", kind)
    with pytest.raises(AccountsError) as caught:
        catalog.load()
    assert caught.value.code == "declaration_invalid"
    assert str(caught.value).startswith(f"declaration_invalid: accounts-models.json: {WHAT[kind]}")


@needs_fifo
def test_a_model_list_file_that_is_a_fifo_is_one_coded_line_for_a_routed_prompt(user_path, ledger_path, tmp_path, canary_key):
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 5 * NANO)], None)
    unbounded(user_path / "accounts-models.json", "fifo")
    result = llm_process("-m", "claude-routed", "hi", cwd=tmp_path / "work")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: declaration_invalid: accounts-models.json: is not a regular file"), line


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_an_unbounded_price_file_is_unsupported_pricing(tmp_path, kind, monkeypatch):
    from llm_accounts.pricing import prices as pricing

    prices = tmp_path / "prices"
    prices.mkdir()
    unbounded(prices / "2099-01-01.json", kind)
    monkeypatch.setattr(pricing, "_price_files", lambda: prices)
    pricing._load_shipped.cache_clear()
    try:
        with pytest.raises(AccountsError) as caught:
            pricing.load_revision("2099-01-01")
    finally:
        pricing._load_shipped.cache_clear()
    assert caught.value.code == "unsupported_pricing"
    assert f"2099-01-01.json: {WHAT[kind]}" in str(caught.value)


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "oversized"])
def test_the_stand_ins_demo_never_replaces_an_unbounded_keys_json(user_path, kind):
    from llm_accounts.standin import ConfigError, demo_config, store_demo_keys

    unbounded(user_path / "keys.json", kind)
    with pytest.raises(ConfigError) as caught:
        store_demo_keys(demo_config())
    assert str(caught.value).startswith(f"llm's keys.json {WHAT[kind]}")
    assert (user_path / "keys.json").is_fifo() == (kind == "fifo")


@needs_fifo
def test_a_stand_in_config_that_is_a_fifo_is_refused(tmp_path):
    from llm_accounts.standin import ConfigError, load_config

    unbounded(tmp_path / "standin.json", "fifo")
    with pytest.raises(ConfigError, match="--config: the file is not a regular file"):
        load_config(tmp_path / "standin.json")


@needs_fifo
def test_llm_accounts_status_says_in_one_line_that_the_model_list_file_is_a_fifo(user_path, ledger_path):
    from click.testing import CliRunner
    from llm.cli import cli

    save_accounts_file([Account("alpha", "ALPHA_KEY", 5 * NANO)], None)
    unbounded(user_path / "accounts-models.json", "fifo")
    result = CliRunner().invoke(cli, ["accounts", "status"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: declaration_invalid: accounts-models.json: is not a regular file")
    assert len(result.output.strip().splitlines()) == 1


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "oversized"])
def test_an_unbounded_provider_pass_state_file_is_declaration_invalid(user_path, kind):
    from llm_accounts.provider import settle as provider_pass

    unbounded(user_path / provider_pass.FILENAME, kind)
    with pytest.raises(AccountsError) as caught:
        provider_pass.load_state()
    assert str(caught.value).startswith(f"declaration_invalid: {provider_pass.FILENAME}: {WHAT[kind]}")
