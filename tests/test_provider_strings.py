"""Every string a provider sends that is stored or shown is matched against the key's runs.

A hostile provider echoes the key into the ``request-id`` header, the message id, the served
model, the stop sequence and reason, and usage field names and counts, streamed and not. What
holds a run of the key is masked where it is shown and logged (llm's logs.db), and not stored at
all in the ledger: a masked request id or model name identifies nothing.
"""

import json
import secrets
import sqlite3
import string

import pytest

from conftest import assert_no_key_material, assert_tree_has_no_key_material, make_key
from hostile import HOLE, MODEL, SERVED, fill, hostile_account, text_reply, usage  # noqa: F401
from llm_accounts.wire.scrub import MASK
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

STREAMS = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])


def prompt(stream):
    return llm_cli("-m", MODEL, "Hello", *([] if stream else ["--no-stream"]))


def logged_response(user_path):
    db = sqlite3.connect(user_path / "logs.db")
    [row] = db.execute("select response_json from turns").fetchall()
    return json.loads(row[0])


def assert_nowhere(result, key, tmp_path):
    assert_no_key_material(result.output, key)
    assert_tree_has_no_key_material(tmp_path, key, ignore=("keys.json",))


def declare_key(user_path, key):
    """Sign alpha's requests with ``key`` instead of the canary (the hostile server takes any)."""
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": key}))


def key_with(piece):
    """A key-shaped secret with ``piece`` (made at run time) in its middle."""
    base = make_key()
    return base[:30] + piece + base[30 + len(piece) :]


@STREAMS
def test_a_request_id_holding_a_key_run_is_not_stored(hostile_account, canary_key, ledger_path, tmp_path, stream):
    hostile_account.answer = lambda request: text_reply(stream, headers={"request-id": "req_" + canary_key[13:60]})
    result = prompt(stream)
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert (row["outcome"], row["request_id"]) == ("complete", None)
    assert_nowhere(result, canary_key, tmp_path)


@STREAMS
def test_a_plain_request_id_is_still_stored(hostile_account, ledger_path, stream):
    hostile_account.answer = lambda request: text_reply(stream, headers={"request-id": "req_011CplainId"})
    assert prompt(stream).exit_code == 0
    assert attempts(ledger_path)[0]["request_id"] == "req_011CplainId"


@STREAMS
def test_a_message_id_holding_the_escaped_key_is_masked_in_logs(hostile_account, canary_key, user_path, tmp_path, stream):
    def answer(request):
        reply = text_reply(stream, id="msg_" + HOLE)
        reply.body = fill(reply.body, canary_key)
        return reply

    hostile_account.answer = answer
    result = prompt(stream)
    assert result.exit_code == 0, result.output
    assert logged_response(user_path)["id"] == "msg_" + MASK
    assert_nowhere(result, canary_key, tmp_path)


@STREAMS
def test_a_served_model_holding_the_key_is_neither_stored_nor_priced(hostile_account, canary_key, user_path, ledger_path, tmp_path, stream):
    hostile_account.answer = lambda request: text_reply(stream, model=SERVED + "-" + canary_key)
    result = prompt(stream)
    assert result.exit_code == 0, result.output  # the answer was delivered; its cost is unknown
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["served_model"], row["cost_nusd"]) == ("open", "usage_incomplete", None, None)
    assert logged_response(user_path)["model"] == SERVED + "-" + MASK
    assert_nowhere(result, canary_key, tmp_path)


@STREAMS
def test_a_stop_sequence_and_reason_holding_the_escaped_key_are_masked(hostile_account, canary_key, user_path, tmp_path, stream):
    def answer(request):
        reply = text_reply(stream, stop_reason="stop_sequence " + HOLE, stop_sequence=HOLE)
        reply.body = fill(reply.body, canary_key, every=3)
        return reply

    hostile_account.answer = answer
    result = prompt(stream)
    assert result.exit_code == 0, result.output
    logged = logged_response(user_path)
    assert (logged["stop_sequence"], logged["stop_reason"]) == (MASK, "stop_sequence " + MASK)
    assert_nowhere(result, canary_key, tmp_path)


@STREAMS
def test_a_usage_field_named_by_a_key_run_is_not_stored(hostile_account, user_path, ledger_path, tmp_path, stream):
    name = secrets.choice(string.ascii_lowercase) + "".join(secrets.choice(string.ascii_lowercase + "_") for _ in range(11))
    key = key_with(name)
    declare_key(user_path, key)
    # Zero: a field the revision does not know bills nothing when empty, so the attempt settles.
    hostile_account.answer = lambda request: text_reply(stream, usage=usage(**{name: 0}))
    result = prompt(stream)
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert row["outcome"] == "complete"
    assert json.loads(row["usage_json"]) == {"input_tokens": 12, "output_tokens": 7}
    assert_nowhere(result, key, tmp_path)


@STREAMS
def test_a_usage_count_whose_digits_hold_a_key_run_is_not_stored(hostile_account, user_path, ledger_path, tmp_path, stream):
    digits = str(secrets.choice(range(1, 10))) + "".join(secrets.choice(string.digits) for _ in range(9))
    key = key_with(digits)
    declare_key(user_path, key)
    # A breakdown of output_tokens bills nothing more, so the attempt settles and its usage is kept.
    details = {"reasoning_tokens": int(digits)}
    hostile_account.answer = lambda request: text_reply(stream, usage=usage(output_tokens_details=details))
    result = prompt(stream)
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert row["outcome"] == "complete"
    assert json.loads(row["usage_json"]) == {"input_tokens": 12, "output_tokens": 7}
    assert_nowhere(result, key, tmp_path)
