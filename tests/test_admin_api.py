"""Reading the Admin API: what comes back is untrusted (docs/security.md "Provider strings"). Key
ids must have the id shape and hold no run of the admin key before they are kept or shown; pages
are followed to their end; refusals map to codes without provider text."""

import datetime as dt
import json

import pytest

from conftest import make_key
from llm_accounts import admin_api, scrub
from llm_accounts.errors import AccountsError
from llm_accounts.keys import Secret


AT = dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.timezone.utc)


class Response:
    def __init__(self, status, body):
        self.status_code, self.content = status, json.dumps(body).encode()

    def json(self):
        return json.loads(self.content)


class Http:
    """Answers each GET with the next page and keeps the params it was asked with."""

    def __init__(self, *pages):
        self.pages, self.asked = list(pages), []

    def get(self, url, params, headers):
        self.asked.append(dict(params))
        return self.pages.pop(0)


def keys_page(*ids, more=False):
    return Response(200, {"data": [{"id": i, "type": "api_key", "status": "active"} for i in ids], "has_more": more,
                          "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None})


def test_key_ids_are_read_across_pages():
    secret = Secret(make_key())
    http = Http(keys_page("apikey_01a", more=True), keys_page("apikey_01b"))
    assert admin_api.active_key_ids(http, "http://x", secret, scrub.run_detector(secret.reveal())) == ["apikey_01a", "apikey_01b"]
    assert http.asked[1]["after_id"] == "apikey_01a"


@pytest.mark.parametrize("bad", ["not-an-id", "apikey_01 spaced", None])
def test_a_key_id_not_in_the_documented_shape_is_refused_without_repeating_it(bad):
    secret = Secret(make_key())
    with pytest.raises(AccountsError) as info:
        admin_api.active_key_ids(Http(keys_page(bad)), "http://x", secret, scrub.run_detector(secret.reveal()))
    assert info.value.code == "provider_error" and "not in the documented shape" in str(info.value)
    assert str(bad) not in str(info.value)


def test_a_key_id_holding_a_run_of_the_admin_key_is_refused():
    key = "sk-ant-admin01-" + "Q7rT9pLm2XvB4nKc" * 5
    secret = Secret(key)
    tainted = "apikey_01" + key[15:40]
    with pytest.raises(AccountsError) as info:
        admin_api.active_key_ids(Http(keys_page(tainted)), "http://x", secret, scrub.run_detector(key))
    assert key[15:23] not in str(info.value)


def test_a_refusal_maps_to_its_code_and_drops_the_providers_message():
    body = {"type": "error", "error": {"type": "permission_error", "message": "admin keys only, you sent sk-ant-xyz"}}
    with pytest.raises(AccountsError) as info:
        admin_api.usage_days(Http(Response(403, body)), "http://x", Secret(make_key()), AT, AT)
    assert info.value.code == "auth_failed"
    assert "permission_error" in str(info.value) and "sk-ant" not in str(info.value)


def test_report_pages_are_followed_with_next_page_until_has_more_is_false():
    first = Response(200, {"data": [{"starting_at": "a"}], "has_more": True, "next_page": "page_2"})
    last = Response(200, {"data": [{"starting_at": "b"}], "has_more": False, "next_page": None})
    http = Http(first, last)
    assert admin_api.cost_days(http, "http://x", Secret(make_key()), AT, AT) == [{"starting_at": "a"}, {"starting_at": "b"}]
    assert "page" not in http.asked[0] and http.asked[1]["page"] == "page_2"
