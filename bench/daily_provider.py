"""Held money given back by the provider pass, and whether each settlement is exact, measured in
one run on the loopback stand-in (issue 31 point 10; docs/architecture.md "Settling from the
provider"; docs/performance.md "Settling from the provider, measured").

    .venv/bin/python bench/daily_provider.py                        # the defaults: three runs, ~10 s
    .venv/bin/python bench/daily_provider.py --seed 7 --singles 40 --collide 8 --mode live --late-delay 0

One virtual morning, on a clock this script moves (the stand-in and the product both read it),
on two accounts in two organizations, each declaring ``admin_key_env`` and ``api_key_id``:

- ``shared``: its organization has the Usage and Cost Analytics API and a workspace whose default
  inference geo is ``us`` (``claude-haiku-5-5`` runs, and is billed, at 1.1x there unless the
  prompt pins ``-o inference_geo global``), and another tool uses its key too
  (``StandIn.add_usage``). Its interrupted prompts: ``--singles`` alone in their minutes (with
  another tool's rows of the other model, batch rows, rows of another key of the organization and
  Console rows in the same minute, and rows of the same key and model a minute away: near misses);
  ``--collide`` with another tool's request on the same key and model in their minutes (standard,
  batch, priority, or one completing three minutes after it arrived, in turn: the report's
  request count shows they are not alone, so they stay open by design); ``--late`` with another
  tool's request in their minutes still running after the last pass (the report leaves it out
  until it completes: it can be neither counted nor charged); ``--bursts`` of two or three
  interrupts sharing a minute (settled as a group, or not at all).
- ``dedicated``: its organization has no Analytics API (``StandIn.set_analytics(org, False)``: the
  legacy usage report is read) and it declares ``dedicated_key``: ``--dedicated`` single
  interrupts and ``--dedicated-bursts`` pairs sharing a minute (the legacy report counts no
  requests and cannot split those: they stay open, ``legacy_group``, by design).

Every interrupted prompt is a real routed prompt whose consumer stops after the first chunk (its
attempt stays open at its whole ceiling); about half the events are followed in the same minute
by a prompt on the same account that completes (the rules take its usage away). The stand-in's
own usage becomes visible ``--report-delay`` seconds after each request completed. Each event
has a slot of three minutes (its minute, the next, and a free one).

Three runs by default, each in a fresh directory from the same plan: ``held`` and ``live`` with
``--report-delay`` (300 s: the docs' "typically within 5 minutes"), and ``live`` again with
``--late-delay`` (1230 s: "delays may occasionally be longer", past the legacy report's
ten-minute rule; 0 skips it). ``--mode held`` or ``--mode live`` runs one mode only.

- ``held``: the automatic pass is held off during the morning, so "before" is every interrupted
  prompt's ceiling. Then the clock moves to the report's refresh R (the instant the stand-in's
  ``data_refreshed_at`` passes the last minute any of the morning's requests can be billed in)
  and, at each of ``--points`` minutes after R, a routed prompt starts the automatic pass as it
  would for a user (``wait_for_background``). The pass runs at most every two minutes and polls
  an organization at most once a minute, so the points are two minutes apart or more.
- ``live``: the automatic pass runs as the morning's own prompts start it, then a routed prompt
  every ``--every`` minutes until the last attempt's refresh is 20 minutes past. Each attempt's
  own refresh R_a is the instant ``data_refreshed_at`` passes its last minute; its delay is
  ``settled_at - R_a`` (on the legacy report, which says nothing of freshness, the same instant
  of the stand-in's: it may settle a little before).

At the end of each, ``llm accounts reconcile --from-provider --json`` says why each attempt still
open stays open (anything it settles is counted apart). Printed, never asserted: held money,
split by key kind (shared keys on the Analytics API, dedicated keys on the legacy report); the
share given back within 15 minutes of the refresh; every settlement checked against what the
stand-in billed for that very request (``pricing.settlement_cost`` of its logged ``usage``, which
carries the geo, and ``model_id``; a group's total against the sum of its members' bills); what
stayed open and why, by case; and the Admin API requests made. A settlement that is not exact is
printed with the account's requests in its minutes and whether the stand-in's report held each
when it was settled.
"""

import argparse
import collections
import contextlib
import datetime as dt
import io
import json
import os
import pathlib
import random
import re
import secrets
import sqlite3
import statistics
import string
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

UTC = dt.timezone.utc
START = dt.datetime(2026, 12, 2, 9, 0, 5, tzinfo=UTC)
SLOT = dt.timedelta(minutes=3)
OLD, NEW = "claude-haiku-4-5-20251001", "claude-haiku-5-5"
# name: (model id, routed model, prompt options)
VARIANTS = {
    "haiku-4-5": (OLD, "claude-routed/claude-haiku-4-5", {}),
    "haiku-5-5": (NEW, "claude-routed/claude-haiku-5-5", {}),
    "haiku-5-5 global": (NEW, "claude-routed/claude-haiku-5-5", {"inference_geo": "global"}),
    "haiku-5-5 us": (NEW, "claude-routed/claude-haiku-5-5", {"inference_geo": "us"}),
}
SHARED_ORG, DEDICATED_ORG = "org-shared", "org-dedicated"
# The prompt a user interrupts, and the quick one that completes beside it.
LONG = "Tell me a long story about a lighthouse keeper who finds a message in a bottle, in three chapters, with a twist"
COLLISIONS = ("standard", "batch", "priority", "completes_later")
KINDS = {"shared": "shared key, Analytics API", "dedicated": "dedicated key, legacy report"}
GOAL_EXACT = 1.0
GOAL_DEDICATED_BACK = 0.95
WITHIN = dt.timedelta(minutes=15)


class Clock:
    """One clock for the stand-in (seconds) and the product (``clock.now``)."""

    def __init__(self, at):
        self.at = at

    def __call__(self):
        return self.at.timestamp()

    def now(self):
        return self.at


def key(kind="api03"):
    alphabet = string.ascii_letters + string.digits
    return f"sk-ant-{kind}-bench" + "".join(secrets.choice(alphabet) for _ in range(80)) + "AA"


def tokens(inputs, outputs):
    return {
        "input_tokens": inputs, "output_tokens": outputs, "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    }


def geo_in_shared(variant):
    """Where a prompt of ``variant`` runs in the shared organization (its workspace: us), as the
    stand-in reports it: another tool's request beside it is given the same."""
    model, _, options = VARIANTS[variant]
    if model != NEW:
        return "not_available"
    return options.get("inference_geo", "us")


def plan(args):
    """The morning: ``[(slot, account, kind, detail, variant, size)]`` and the number of slots."""
    rng = random.Random(args.seed)
    shared = (
        [("single", None)] * args.singles
        + [("collide", COLLISIONS[i % len(COLLISIONS)]) for i in range(args.collide)]
        + [("late", None)] * args.late
        + [("burst", None)] * args.bursts
    )
    rng.shuffle(shared)
    # Another tool's request that completes minutes after it arrived must be in the report by
    # the first pass for the case to be what it says: not in the last slots.
    for i, (kind, detail) in enumerate(shared):
        if detail == "completes_later" and i >= len(shared) - 3:
            j = next((j for j in range(len(shared) - 3) if shared[j][0] == "single"), None)
            if j is not None:
                shared[i], shared[j] = shared[j], shared[i]
    dedicated = [("single", None)] * args.dedicated + [("burst", None)] * args.dedicated_bursts
    rng.shuffle(dedicated)
    slots = max(len(shared), len(dedicated))
    events = []
    for slot, (kind, detail) in enumerate(shared):
        variant = rng.choice(("haiku-4-5", "haiku-4-5", "haiku-5-5", "haiku-5-5", "haiku-5-5 global"))
        events.append((slot, "shared", kind, detail, variant, rng.choice((2, 3)) if kind == "burst" else 1))
    for slot, (kind, _) in zip(sorted(rng.sample(range(slots), len(dedicated))), dedicated):
        variant = rng.choice(("haiku-4-5", "haiku-4-5", "haiku-5-5", "haiku-5-5 us"))
        events.append((slot, "dedicated", kind, None, variant, 2 if kind == "burst" else 1))
    return sorted(events, key=lambda e: (e[0], e[1] != "shared")), slots


def scenario(args, mode, report_delay):
    """One run (``held`` or ``live``) in the current, fresh llm user directory; its raw results."""
    import llm
    from click.testing import CliRunner
    from llm.cli import cli

    from llm_accounts import clock
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.money import NANO
    from llm_accounts.pricing.prices import current_revision, settlement_cost
    from llm_accounts.provider import rules, settle as provider_pass
    from llm_accounts.standin import StandIn
    from llm_accounts.standin.config import default_api_key_id

    rng = random.Random(args.seed + 1)
    fake = Clock(START)
    clock.now = fake.now
    keys = {"SHARED_KEY": key(), "SHARED_ADMIN": key("admin01"), "DEDICATED_KEY": key(), "DEDICATED_ADMIN": key("admin01")}
    user = pathlib.Path(os.environ["LLM_USER_PATH"])
    (user / "keys.json").write_text(json.dumps(keys))
    key_id = {"shared": default_api_key_id("shared"), "dedicated": default_api_key_id("dedicated")}
    save_accounts_file([
        Account("shared", "SHARED_KEY", 500 * NANO, admin_key_env="SHARED_ADMIN", api_key_id=key_id["shared"]),
        Account("dedicated", "DEDICATED_KEY", 500 * NANO, rank=1, admin_key_env="DEDICATED_ADMIN",
                api_key_id=key_id["dedicated"], dedicated_key=True),
    ], None)
    config = {
        "keys": [
            {"label": "shared", "key": keys["SHARED_KEY"], "organization": SHARED_ORG},
            {"label": "dedicated", "key": keys["DEDICATED_KEY"], "organization": DEDICATED_ORG},
        ],
        "admin_keys": [
            {"key": keys["SHARED_ADMIN"], "organization": SHARED_ORG},
            {"key": keys["DEDICATED_ADMIN"], "organization": DEDICATED_ORG},
        ],
        "report_delay": report_delay,
        "report_bucketing": args.bucketing,
        "organizations": {SHARED_ORG: {"inference_geo_default": "us"}},
    }
    events, slots = plan(args)
    delay = dt.timedelta(seconds=report_delay)
    # Another tool's request still running after the last pass of either mode.
    never_before = START + SLOT * (slots + 1) + delay + dt.timedelta(minutes=max(args.points) + 60)
    ledger_file = os.environ["LLM_ACCOUNTS_LEDGER"]

    def query(sql):
        if not os.path.exists(ledger_file):
            return []
        db = sqlite3.connect(ledger_file)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(sql)]
        finally:
            db.close()

    def ledger_rows():
        return {r["id"]: r for r in query("SELECT * FROM attempt")}

    interrupted = []  # {id, account, kind, detail, variant, burst, entry}
    requests = []  # every prompt's (attempt id, account, entry), for what the report held when
    foreign = collections.Counter()
    every = provider_pass.RUN_EVERY
    if mode == "held":
        provider_pass.RUN_EVERY = dt.timedelta(days=365)
        # No pass has run yet, so the first prompt would start one: the morning holds it off.
        provider_pass._update_state(provider_pass.state_path(), lambda d: d.update(last_run=clock.isoformat(fake.now())))
    stderr = io.StringIO()  # each interrupted prompt's held-open warning, as a user would see it
    with StandIn(config, clock=fake) as server, contextlib.redirect_stderr(stderr):
        server.set_analytics(DEDICATED_ORG, False)
        os.environ["LLM_ACCOUNTS_BASE_URL"] = server.base_url

        def served():
            return [e for e in server.requests if e["path"] == "/v1/messages"]

        def admin_requests():
            return [e for e in server.requests if e["path"].startswith("/v1/organizations/")]

        def prompt(variant, account, *, interrupt):
            """A routed prompt; ``(attempt id, the stand-in's log entry of its request)``."""
            _, routed, options = VARIANTS[variant]
            known, sent = set(ledger_rows()), len(served())
            response = llm.get_model(routed).prompt(
                LONG if interrupt else "Thanks!", max_tokens=400 if interrupt else 50, account=account, **options,
            )
            if interrupt:
                iterator = iter(response)
                next(iterator)
                iterator.close()
            else:
                response.text()
            [new] = set(ledger_rows()) - known
            entries = served()[sent:]
            if len(entries) != 1:
                raise SystemExit(f"bench: one prompt made {len(entries)} Messages requests; attempts and bills do not pair")
            deadline = time.monotonic() + 10
            while entries[0]["completed_at"] is None and time.monotonic() < deadline:
                time.sleep(0.005)  # the stand-in notes the client went away before the clock moves
            requests.append((new, account, entries[0]))
            if mode == "live" and not provider_pass.wait_for_background(120):
                raise SystemExit("bench: the automatic pass did not finish within 120 s")
            return new, entries[0]

        def add(at, variant, *, key=None, tier="standard", completed=None, what):
            server.add_usage(
                SHARED_ORG, key_id["shared"] if key is None else key, VARIANTS[variant][0],
                tokens(rng.randint(20, 400), rng.randint(5, 300)), at=at, completed_at=completed,
                service_tier=tier, inference_geo=geo_in_shared(variant),
            )
            foreign[what] += 1

        for slot, account, kind, detail, variant, size in events:
            t0 = START + SLOT * slot + (dt.timedelta(seconds=20) if account == "dedicated" else dt.timedelta())
            burst = f"{account}-{slot}" if size > 1 else None
            for n in range(size):
                fake.at = t0 + dt.timedelta(seconds=6 * n)
                attempt_id, entry = prompt(variant, account, interrupt=True)
                interrupted.append({"id": attempt_id, "account": account, "kind": kind, "detail": detail,
                                    "variant": variant, "burst": burst, "entry": entry})
            if rng.random() < 0.5:
                fake.at = t0 + dt.timedelta(seconds=35)
                prompt(variant, account, interrupt=False)
            if account != "shared":
                continue
            minute = rules.minute_of(t0)
            other = "haiku-5-5" if VARIANTS[variant][0] == OLD else "haiku-4-5"
            if kind == "collide":
                at = t0 + dt.timedelta(seconds=30)
                if detail == "completes_later":
                    add(at, variant, completed=at + dt.timedelta(minutes=3), what="in an attempt's minutes, completing 3 min later")
                else:
                    add(at, variant, tier=detail, what=f"in an attempt's minutes, {detail}")
            elif kind == "late":
                add(t0 + dt.timedelta(seconds=40), variant, completed=never_before,
                    what="in an attempt's minutes, still running after the last pass")
            # Near misses: they prove nothing about the attempts and must not keep them open.
            add(minute + dt.timedelta(seconds=rng.randint(0, 59)), other, what="same key, other model, same minute")
            add(minute + dt.timedelta(seconds=rng.randint(0, 59)), other, tier="batch",
                what="same key, other model, same minute, batch")
            add(minute + dt.timedelta(seconds=rng.randint(0, 59)), variant, key=default_api_key_id("othertool"),
                what="another key of the organization, same model and minute")
            server.add_usage(SHARED_ORG, None, VARIANTS[variant][0], tokens(50, 20), at=minute + dt.timedelta(seconds=50))
            foreign["the Console (no key id), same model and minute"] += 1
            add(minute + dt.timedelta(minutes=2, seconds=rng.randint(0, 59)), variant,
                tier=rng.choice(("standard", "batch", "priority")), what="same key and model, a minute no attempt is in")

        rows = ledger_rows()
        ours = {a["id"] for a in interrupted}
        end_of_morning = fake.at
        # Each attempt's refresh: data_refreshed_at (the clock less report_delay) past the last
        # minute its request can be billed in (rules.Attempt.minutes, as the pass reads it).
        for a in interrupted:
            last = rules.Attempt.from_row(rows[a["id"]]).minutes(fake.now())[1]
            a["refresh"] = last + rules.MINUTE + delay
        refresh = max(rules.Attempt.from_row(r).minutes(fake.now())[1] for r in rows.values()) + rules.MINUTE + delay
        open_at_end = {i: r for i, r in rows.items() if r["state"] == "open"}
        points = []
        made = len(admin_requests())
        if mode == "held":
            provider_pass.RUN_EVERY = every
            for point in sorted(args.points):
                fake.at = refresh + dt.timedelta(minutes=point)
                prompt(rng.choice(list(VARIANTS)[:2]), rng.choice(("shared", "dedicated")), interrupt=False)
                if not provider_pass.wait_for_background(120):
                    raise SystemExit("bench: the automatic pass did not finish within 120 s")
                rows = ledger_rows()
                points.append({
                    "minutes": point, "open": {i for i in ours if rows[i]["state"] == "open"},
                    "admin_requests": len(admin_requests()) - made, "pass_error": provider_pass.load_state().get("error"),
                })
                made = len(admin_requests())
        else:
            stop = max(a["refresh"] for a in interrupted) + WITHIN + dt.timedelta(minutes=5)
            while fake.at < stop:
                fake.at += dt.timedelta(minutes=args.every)
                prompt(rng.choice(list(VARIANTS)[:2]), rng.choice(("shared", "dedicated")), interrupt=False)
        rows = ledger_rows()
        settled_by_pass = {i for i in ours if rows[i]["state"] == "settled"}
        pass_error = provider_pass.load_state().get("error")
        before_command = len(admin_requests())

        fake.at += dt.timedelta(minutes=1)
        result = CliRunner().invoke(cli, ["accounts", "reconcile", "--from-provider", "--json"], catch_exceptions=False)
        try:
            command = json.loads(result.output)
        except ValueError:
            raise SystemExit(f"bench: reconcile --from-provider --json answered (exit {result.exit_code}): {result.output}")
        rows = ledger_rows()
        sources = {r["attempt_id"]: r["source_ref"] for r in query("SELECT attempt_id, source_ref FROM adjustment WHERE kind = 'reconciliation'")}
        admin = admin_requests()
        provider_pass.RUN_EVERY = every

    revision = current_revision()
    shown = [{"id": i, "account": account, "arrived": entry["arrived_at"], "visible": entry["completed_at"] + report_delay,
              "billed": settlement_cost(entry["usage"], entry["model_id"], None, revision),
              "outcome": rows[i]["outcome"]} for i, account, entry in requests]
    for a in interrupted:
        a["billed"] = settlement_cost(a["entry"]["usage"], a["entry"]["model_id"], None, revision)
        a["row"] = rows[a["id"]]
        a["ceiling"] = a["row"]["ceiling_nusd"]
        a["source"] = sources.get(a["id"])
        a["settled_at"] = dt.datetime.fromisoformat(a["row"]["settled_at"]) if a["row"]["settled_at"] else None
    # Polls: an organization's Admin API requests at one instant of the clock are one pass's read.
    polls = collections.defaultdict(set)
    for e in admin:
        polls[e["organization"]].add(e["arrived_at"])
    closest = min((b - a for times in polls.values() for a, b in zip(sorted(times), sorted(times)[1:])), default=None)
    return {
        "mode": mode, "args": vars(args), "report_delay": report_delay, "slots": slots, "interrupted": interrupted,
        "open_not_ours": len(set(open_at_end) - ours), "held_before": sum(a["ceiling"] for a in interrupted),
        "refresh": refresh, "end_of_morning": end_of_morning, "end": fake.at, "points": points,
        "settled_by_pass": settled_by_pass, "pass_error": pass_error,
        "command": command, "command_exit": result.exit_code, "command_requests": len(admin) - before_command,
        "admin": collections.Counter(e["path"] for e in admin), "admin_total": len(admin),
        "polls": {org: len(times) for org, times in polls.items()}, "closest_polls_s": closest,
        "foreign": foreign, "requests": shown,
        # Anything else on standard error (a stand-in failure, say) is shown, never swallowed.
        "stderr": [line for line in stderr.getvalue().splitlines() if line.strip() and "keeps $" not in line],
    }


def case_of(a):
    if a["account"] == "dedicated":
        return "dedicated: a pair in one minute" if a["burst"] else "dedicated: alone in its minutes"
    if a["kind"] == "collide":
        return f"shared: another tool's request in its minutes ({a['detail'].replace('_', ' ')})"
    if a["kind"] == "late":
        return "shared: another tool's request in its minutes, still running"
    if a["kind"] == "burst":
        return "shared: a burst of 2-3 in one minute"
    return "shared: alone in its minutes (near misses around)"


def figures(run):
    interrupted = run["interrupted"]
    by_id = {a["id"]: a for a in interrupted}
    before = {account: sum(a["ceiling"] for a in interrupted if a["account"] == account) for account in KINDS}

    def held(ids, account=None):
        return sum(by_id[i]["ceiling"] for i in ids if account is None or by_id[i]["account"] == account)

    def back_in_time(a):
        if a["id"] not in run["settled_by_pass"]:
            return False
        if run["mode"] == "held":
            return a["settled_at"] <= run["refresh"] + WITHIN
        return a["settled_at"] - a["refresh"] <= WITHIN

    back = {account: sum(a["ceiling"] for a in interrupted if a["account"] == account and back_in_time(a)) for account in KINDS}
    share15 = {account: back[account] / before[account] if before[account] else None for account in KINDS}
    delays = {
        account: sorted((a["settled_at"] - a["refresh"]).total_seconds() / 60 for a in interrupted
                        if a["account"] == account and a["id"] in run["settled_by_pass"])
        for account in KINDS
    }
    table = [{"minutes": p["minutes"], "held": held(p["open"]), **{k: held(p["open"], k) for k in KINDS},
              "admin_requests": p["admin_requests"], "pass_error": p["pass_error"]} for p in run["points"]]

    settlements, seen = [], set()
    for a in interrupted:
        if a["row"]["state"] != "settled" or a["id"] in seen:
            continue
        source = a["source"] or ""
        members = [b for b in interrupted if b["source"] == source] if ":joint:" in source else [a]
        seen.update(b["id"] for b in members)
        total = sum(b["row"]["cost_nusd"] for b in members)
        bills = [b["billed"] for b in members]
        billed = None if None in bills else sum(bills)
        bursts = {b["burst"] for b in members}
        settlements.append({
            "account": a["account"], "members": members, "settled": total, "billed": billed,
            "exact": billed is not None and total == billed, "source": source,
            "by_pass": all(b["id"] in run["settled_by_pass"] for b in members),
            "one_burst": len(members) == 1 or len(bursts) == 1 and None not in bursts,
        })
    kept = {k["attempt_id"]: k["reason"] for account in run["command"] for k in account["kept_open"]}
    still_open = [a for a in interrupted if a["row"]["state"] == "open"]
    reasons = collections.Counter((KINDS[a["account"]], kept.get(a["id"], "(not listed by reconcile)")) for a in still_open)
    cases = {}
    for a in sorted(interrupted, key=lambda a: (a["account"] != "shared", case_of(a))):
        c = cases.setdefault(case_of(a), {"attempts": 0, "settled": 0, "held": 0, "back": 0, "open": collections.Counter()})
        c["attempts"] += 1
        c["held"] += a["ceiling"]
        c["back"] += a["ceiling"] if back_in_time(a) else 0
        if a["row"]["state"] == "settled":
            c["settled"] += 1
        else:
            c["open"][kept.get(a["id"], "(not listed)")] += 1
    # Open although nothing in the report stands in their way (no other request in their minutes;
    # not two on the legacy report): held money that should have come back.
    should = [a for a in still_open
              if (a["account"] == "dedicated" and not a["burst"]) or (a["account"] == "shared" and a["kind"] in ("single", "late"))]
    return {"before": before, "share15": share15, "delays": delays, "table": table, "settlements": settlements,
            "reasons": reasons, "cases": cases, "should": should, "still_open": still_open}


SPAN = re.compile(r"usage_report:\w+:(\d{4}-\d\d-\d\dT\d\d:\d\dZ)(?:\.\.(\d{4}-\d\d-\d\dT\d\d:\d\dZ))?:")


def what_the_report_held(run, settlement):
    """For a settlement that is not exact: the account's requests in its minutes, and whether the
    stand-in's report held each when the attempt was settled."""
    match = SPAN.match(settlement["source"])
    if match is None:
        return []
    first, last = (dt.datetime.strptime(m, "%Y-%m-%dT%H:%MZ").replace(tzinfo=UTC) for m in (match[1], match[2] or match[1]))
    at = settlement["members"][0]["settled_at"]
    out = []
    for r in run["requests"]:
        arrived = dt.datetime.fromtimestamp(r["arrived"], UTC)
        if r["account"] != settlement["account"] or not first <= arrived < last + dt.timedelta(minutes=1):
            continue
        visible = dt.datetime.fromtimestamp(r["visible"], UTC)
        out.append(f"{r['outcome']} attempt {r['id']} sent {arrived:%H:%M:%S}, billed {r['billed']} n$, in the report from "
                   f"{visible:%H:%M:%S}: {'held' if visible <= at else 'NOT YET held'} when settled at {at:%H:%M:%S}")
    return out


def show(run, f):
    from llm_accounts.money import usd_fine

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    interrupted = run["interrupted"]
    late = f"report_delay {run['report_delay']:g} s"
    if run["mode"] == "held":
        print(f"== held, {late}: the pass held off all morning, then started by a routed prompt at "
              f"R+{', R+'.join(str(p) for p in run['args']['points'])} min")
    else:
        print(f"== live, {late}: the pass started by the morning's prompts, then by a routed prompt every {run['args']['every']} min")
    print(f"Held by the {len(interrupted)} interrupted prompts: {usd_fine(run['held_before'])} "
          f"(shared {usd_fine(f['before']['shared'])}, dedicated {usd_fine(f['before']['dedicated'])})"
          + (f"; {run['open_not_ours']} other attempts open" if run["open_not_ours"] else ""))
    if run["mode"] == "held":
        print(f"Report refresh R (data_refreshed_at past the morning's last minute): {run['refresh']:%H:%M:%S} UTC")
        print("  point     | held        | shared key, Analytics | dedicated key, legacy | Admin API requests")
        for row in f["table"]:
            print(f"  R+{row['minutes']:<2d} min  | {usd_fine(row['held']):11s} | {usd_fine(row['shared']):21s} | "
                  f"{usd_fine(row['dedicated']):21s} | {row['admin_requests']}"
                  + (f"  (the pass failed: {row['pass_error']})" if row["pass_error"] else ""))
        print("Given back within 15 min of R:")
    else:
        print(f"Morning {START:%H:%M}-{run['end_of_morning']:%H:%M}, last pass {run['end'] - dt.timedelta(minutes=1):%H:%M} UTC"
              + (f"; the last pass failed: {run['pass_error']}" if run["pass_error"] else ""))
        for account, label in KINDS.items():
            d = f["delays"][account]
            if d:
                print(f"  {label}: settled {statistics.median(d):.1f} min after its own refresh (median), "
                      f"{min(d):.1f} to {max(d):.1f}")
        print("Given back within 15 min of each attempt's own refresh:")
    print(f"  shared keys, Analytics API:    {pct(f['share15']['shared'])}")
    print(f"  dedicated keys, legacy report: {pct(f['share15']['dedicated'])}   (goal >= {100 * GOAL_DEDICATED_BACK:.0f}%)")
    settlements = f["settlements"]
    exact = sum(1 for s in settlements if s["exact"])
    groups = [s for s in settlements if len(s["members"]) > 1]
    print(f"Settlements: {len(settlements)} ({len(settlements) - len(groups)} single, {len(groups)} groups of "
          f"{sum(len(s['members']) for s in groups)} attempts); exact: {exact} of {len(settlements)} "
          f"({pct(exact / len(settlements)) if settlements else '-'}; goal {100 * GOAL_EXACT:.0f}%)")
    later = [s for s in settlements if not s["by_pass"]]
    if later:
        print(f"  {len(later)} of them by the final reconcile --from-provider, not by the automatic pass")
    for s in settlements:
        if not s["exact"]:
            a = s["members"][0]
            print(f"  NOT EXACT: {s['account']} {a['variant']} {case_of(a)}: attempt {', '.join(m['id'] for m in s['members'])} "
                  f"created {a['row']['created_at']}: settled {s['settled']} n$, billed {s['billed']} n$ ({s['source']})")
            for line in what_the_report_held(run, s):
                print(f"    {line}")
        if not s["one_burst"]:
            print(f"  A GROUP THAT IS NOT ONE BURST: {s['source']}: {len(s['members'])} attempts")
    print(f"Still open at the end: {len(f['still_open'])}, {usd_fine(sum(a['ceiling'] for a in f['still_open']))}; "
          f"why (reconcile --from-provider --json, exit {run['command_exit']}):")
    for (kind, reason), n in sorted(f["reasons"].items()):
        print(f"  {n:3d}  {kind}: {reason}")
    for account in run["command"]:
        if account["skipped"] or account["error"]:
            print(f"  {account['account']}: skipped={account['skipped']!r} error={account['error']!r}")
    for a in f["should"]:
        print(f"  OPEN THOUGH NOTHING IN THE REPORT STANDS IN THE WAY: {a['id']} {a['account']} {a['variant']} "
              f"{case_of(a)}, created {a['row']['created_at']}")
    print("  case                                                               | attempts | settled | back in 15 min | open (why)")
    for name, c in f["cases"].items():
        why = ", ".join(f"{n} {r}" for r, n in sorted(c["open"].items())) or "-"
        print(f"  {name:66s} | {c['attempts']:8d} | {c['settled']:7d} | {100 * c['back'] / c['held']:13.0f}% | {why}")
    for line in run["stderr"]:
        print(f"  standard error: {line}")
    minutes = (run["end"] - START).total_seconds() / 60
    print(f"Admin API requests: {run['admin_total']} over {minutes:.0f} virtual minutes "
          f"({run['command_requests']} by the final reconcile); "
          + ", ".join(f"{n} GET {p}" for p, n in sorted(run["admin"].items())))
    print(f"  polls (an organization read at one instant): " + ", ".join(f"{o} {n}" for o, n in sorted(run["polls"].items()))
          + ("" if run["closest_polls_s"] is None else f"; closest two of one organization {run['closest_polls_s']:.0f} s apart"))
    print()


def in_fresh_directory(args, mode, report_delay):
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLM_USER_PATH"] = str(pathlib.Path(tmp) / "llm-user")
        os.environ["LLM_ACCOUNTS_LEDGER"] = str(pathlib.Path(tmp) / "ledger.db")
        for name in ("ANTHROPIC_ACCOUNTS", "LLM_ACCOUNTS_PROVIDER_REPORT", "LLM_ACCOUNTS_CLIENT"):
            os.environ.pop(name, None)
        pathlib.Path(os.environ["LLM_USER_PATH"]).mkdir()
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            return scenario(args, mode, report_delay)
        finally:
            os.chdir(cwd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--singles", type=int, default=10, help="shared key: interrupts alone in their minutes")
    parser.add_argument("--collide", type=int, default=4,
                        help="shared key: interrupts beside another tool's request (standard, batch, priority, completing later, in turn)")
    parser.add_argument("--late", type=int, default=2,
                        help="shared key: interrupts beside another tool's request still running after the last pass")
    parser.add_argument("--bursts", type=int, default=3, help="shared key: bursts of 2-3 interrupts sharing a minute")
    parser.add_argument("--dedicated", type=int, default=8, help="dedicated key: interrupts alone in their minutes")
    parser.add_argument("--dedicated-bursts", type=int, default=1, help="dedicated key: pairs of interrupts sharing a minute")
    parser.add_argument("--report-delay", type=float, default=300, help="seconds after completion a request is in the report")
    parser.add_argument("--late-delay", type=float, default=1230,
                        help="a further live run with usage this late (past the legacy report's 10-minute rule); 0: none")
    parser.add_argument("--bucketing", choices=("arrival", "completion"), default="arrival")
    parser.add_argument("--points", default="1,5,10,15", help="held: minutes after the refresh at which a prompt starts the pass")
    parser.add_argument("--every", type=int, default=2, help="live: minutes between the routed prompts after the morning")
    parser.add_argument("--mode", choices=("held", "live", "both"), default="both")
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    args.points = sorted(int(p) for p in args.points.split(","))
    if any(b - a < 2 for a, b in zip(args.points, args.points[1:])):
        parser.error("--points: the automatic pass runs at most every 2 minutes; space them 2 minutes or more")
    if args.every < 1:
        parser.error("--every: at least 1 (minutes)")
    started = time.monotonic()
    events, slots = plan(args)
    print(f"bench/daily_provider.py: {len(events)} events in {slots} slots of 3 min, seed {args.seed}, "
          f"bucketing by {args.bucketing}")
    runs = [(mode, args.report_delay) for mode in (("held", "live") if args.mode == "both" else (args.mode,))]
    if args.late_delay and args.mode in ("live", "both"):
        runs.append(("live", args.late_delay))
    foreign = None
    for mode, report_delay in runs:
        run = in_fresh_directory(args, mode, report_delay)
        if foreign is None:
            foreign = run["foreign"]
            print(f"Another tool's rows on org-shared: {sum(foreign.values())}: "
                  + "; ".join(f"{n} {what}" for what, n in foreign.items()))
            print()
        show(run, figures(run))
    print(f"(wall time {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
