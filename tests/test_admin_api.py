"""Reading the Admin API: what comes back is untrusted (docs/security.md "Provider strings"). Key
ids must have the id shape and hold no run of the admin key before they are kept or shown; pages
are followed to their end; refusals map to codes without provider text."""

import contextlib
import datetime as dt
import json

import pytest

from conftest import assert_no_key_material, make_key
from llm_accounts.errors import AccountsError
from llm_accounts.keys import Secret
from llm_accounts.provider import client as admin_api
from llm_accounts.wire import scrub


AT = dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.timezone.utc)


class Response:
    def __init__(self, status, body):
        self.status_code, self.content, self.headers = status, json.dumps(body).encode(), {}

    def iter_raw(self):
        yield self.content


class Http:
    """Answers each GET with the next page and keeps the params it was asked with."""

    def __init__(self, *pages):
        self.pages, self.asked = list(pages), []

    def stream(self, method, url, params, headers):
        self.asked.append(dict(params))
        return contextlib.nullcontext(self.pages.pop(0))


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


class PageServer:
    """A loopback server answering every GET with ``body``: real HTTP through the project's own
    client, so httpx's INFO log of each URL is what the test reads."""

    def __init__(self, body):
        import http.server
        import threading

        payload = json.dumps(body).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.server.paths.append(self.path)
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.paths = []
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self.server

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


ADMIN_KEY = "sk-ant-admin01-" + "Q7rT9pLm2XvB4nKc" * 5


@pytest.mark.parametrize(
    "read, body",
    [
        (lambda http, base, secret: admin_api.cost_days(http, base, secret, AT, AT),
         {"data": [], "has_more": True, "next_page": "page_" + ADMIN_KEY[20:32]}),
        (lambda http, base, secret: admin_api.active_key_ids(http, base, secret, scrub.run_detector(secret.reveal())),
         {"data": [{"id": "apikey_01a", "status": "active"}], "has_more": True, "last_id": "apikey_" + ADMIN_KEY[20:32]}),
    ],
    ids=["next_page", "last_id"],
)
def test_a_page_token_holding_a_run_of_the_admin_key_is_never_sent_back_in_a_url(read, body, caplog):
    from llm_accounts.wire import transport

    caplog.set_level("DEBUG")
    with PageServer(body) as server, transport.client() as http:
        with pytest.raises(AccountsError) as info:
            read(http, f"http://127.0.0.1:{server.server_port}", Secret(ADMIN_KEY))
        asked = list(server.paths)
    for text in (str(info.value), caplog.text, *asked):
        assert_no_key_material(text, ADMIN_KEY)
    assert info.value.code == "provider_error" and "page token" in str(info.value)
    assert len(asked) == 1


@pytest.mark.parametrize("token", ["x" * 1000, "page 2", "pa\u00e9ge", "page\n2"])
def test_a_page_token_that_is_not_a_short_printable_ascii_string_stops_the_read(token):
    first = Response(200, {"data": [], "has_more": True, "next_page": token})
    http = Http(first)
    with pytest.raises(AccountsError) as info:
        admin_api.cost_days(http, "http://x", Secret(make_key()), AT, AT)
    assert info.value.code == "provider_error" and token not in str(info.value)
    assert len(http.asked) == 1


def test_a_page_token_given_twice_stops_the_read_in_one_line():
    # Before: a repeated next_page read the same pages again, 250 requests in 3.3 s.
    again = [Response(200, {"data": [], "has_more": True, "next_page": "page_same"}) for _ in range(5)]
    http = Http(*again)
    with pytest.raises(AccountsError) as caught:
        admin_api.cost_days(http, "http://x", Secret(make_key()), AT, AT)
    assert caught.value.code == "provider_error"
    assert "gave a page token it had given before; the read stops" in str(caught.value)
    assert len(http.asked) == 2


def test_has_more_without_a_page_token_stops_the_read():
    http = Http(Response(200, {"data": [], "has_more": True, "next_page": None}))
    with pytest.raises(AccountsError) as caught:
        admin_api.cost_days(http, "http://x", Secret(make_key()), AT, AT)
    assert "said it has more but gave no page token" in str(caught.value)


def test_the_analytics_api_is_asked_for_every_key_id_of_the_organization_in_one_request():
    page = Response(200, {"data": [], "has_more": False, "next_page": None, "data_refreshed_at": "2026-12-31T23:58:00Z"})
    http = Http(page)
    read = admin_api.analytics_usage(http, "http://x", Secret(make_key()), AT - dt.timedelta(hours=1), AT, ["apikey_01a", "apikey_01b"])
    [asked] = http.asked
    assert asked["api_key_ids[]"] == ["apikey_01a", "apikey_01b"]
    assert asked["group_by[]"] == ["api_key_id", "model", "service_tier", "inference_geo", "speed"]
    assert (asked["time_bucket_width"], asked["limit"]) == ("1m", 1000)
    assert read.refreshed_at == dt.datetime(2026, 12, 31, 23, 58, tzinfo=dt.timezone.utc)


def test_the_analytics_api_is_read_a_day_at_a_time_and_a_page_without_its_refresh_vouches_for_nothing():
    pages = [Response(200, {"data": [], "has_more": False, "data_refreshed_at": "2026-12-31T23:58:00Z"}),
             Response(200, {"data": [], "has_more": False})]
    http = Http(*pages)
    read = admin_api.analytics_usage(http, "http://x", Secret(make_key()), AT - dt.timedelta(hours=30), AT, ["apikey_01a"])
    assert len(http.asked) == 2  # one-minute buckets: at most 24 hours a request
    assert read.refreshed_at is None
