"""Spend by conversation at any number of conversations (docs/architecture.md "Spend").

A busy period holds as many conversations as a third of its attempts, so this view never reads
them all: the costliest come first from the ``month_conversation_top`` index (or
``month_conversation_account_top`` for one account), in the order shown, up to the limit; the
period's total and how many conversations were left out come from ``month_conversation_total``,
one row per account (llm_accounts/schema.py keeps both). A conversation that moved to another
account (``llm accounts rebind``) is one row per account, each with what it spent there.

Prompts without a conversation (a Python ``model.prompt()``: scope kind ``prompt``, or the old
``instance``) are not conversations, but their spend is the period's too: ``without_conversation``
gives it per account, so the view adds up to ``llm accounts spend``. It is the period's
``month_model`` total less ``month_conversation_total``'s, two rows per account, no attempt read.

A client filter is the exception: the totals carry no client, so it sums the period's attempt
rows with that label, as ``Ledger.spend_by`` does for every dimension.
"""

TOP = """SELECT conversation, account, attempts, settled_nusd, open_nusd FROM month_conversation
WHERE month_utc = :month AND provider = :provider AND attempts > 0 {account}
ORDER BY month_utc DESC, settled_nusd + open_nusd DESC, {order}conversation {limit}"""
# The ORDER BY is each index's own column order (the account is fixed in the second), so the
# database walks the index and stops at the limit instead of sorting the period.

TOTAL = """SELECT COALESCE(SUM(conversations), 0), COALESCE(SUM(attempts), 0), COALESCE(SUM(settled_nusd), 0),
       COALESCE(SUM(open_nusd), 0)
FROM month_conversation_total WHERE month_utc = :month AND provider = :provider {account}"""

WITH_CLIENT = """SELECT scope_id, account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE month_utc = :month AND provider = :provider AND scope_kind = 'conversation' AND client = :client
  {account}
GROUP BY scope_id, account"""


# Every attempt is in month_model; those of conversations are in month_conversation_total.
WITHOUT = """SELECT m.account, m.attempts - COALESCE(c.attempts, 0), m.settled_nusd - COALESCE(c.settled_nusd, 0),
       m.open_nusd - COALESCE(c.open_nusd, 0)
FROM (SELECT account, SUM(attempts) AS attempts, SUM(settled_nusd) AS settled_nusd, SUM(open_nusd) AS open_nusd
      FROM month_model WHERE month_utc = :month AND provider = :provider {account} GROUP BY account) m
LEFT JOIN month_conversation_total c ON c.month_utc = :month AND c.provider = :provider AND c.account = m.account"""

WITHOUT_CLIENT = """SELECT account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE month_utc = :month AND provider = :provider AND scope_kind <> 'conversation' AND client = :client
  {account}
GROUP BY account"""


def spend_by_conversation(conn, provider, month_utc, account=None, client=None, limit=None):
    """The period's costliest conversations: ``{"rows": [...], "more": N, "total": {...}}``.

    Each row is ``key`` (the conversation id), ``account``, ``attempts``, ``settled_nusd`` and
    ``open_nusd`` (held ceilings, never summed into spend), by settled plus held, descending, then
    account and id. ``more`` is how many rows ``limit`` left out; ``total`` covers every
    conversation of the period (and account), with ``conversations`` their number of rows.
    ``without_conversation`` is the spend of prompts without a conversation, one row of
    ``account``, ``attempts``, ``settled_nusd`` and ``open_nusd`` per account that has any, by
    account; it is in neither ``rows`` nor ``total``."""
    params = {"provider": provider, "month": month_utc, "account": account, "client": client}
    where_account = "AND account = :account" if account is not None else ""
    if client is not None:
        rows = [_row(row) for row in conn.execute(WITH_CLIENT.format(account=where_account), params)]
        rows.sort(key=lambda row: (-(row["settled_nusd"] + row["open_nusd"]), row["account"], row["key"]))
        total = _total(len(rows), *(sum(row[name] for row in rows) for name in ("attempts", "settled_nusd", "open_nusd")))
        shown = rows if limit is None else rows[:limit]
    else:
        sql = TOP.format(account=where_account, order="" if account is not None else "account, ",
                         limit="LIMIT :limit" if limit is not None else "")
        shown = [_row(row) for row in conn.execute(sql, dict(params, limit=limit))]
        total = _total(*conn.execute(TOTAL.format(account=where_account), params).fetchone())
    sql = (WITHOUT_CLIENT if client is not None else WITHOUT).format(account=where_account)
    without = [
        {"account": account_name, "attempts": int(attempts), "settled_nusd": int(settled), "open_nusd": int(held)}
        for account_name, attempts, settled, held in conn.execute(sql, params)
        if attempts
    ]
    without.sort(key=lambda row: row["account"])
    return {"rows": shown, "more": total["conversations"] - len(shown), "total": total, "without_conversation": without}


def _row(row):
    key, account, attempts, settled, held = row
    return {"key": key, "account": account, "attempts": int(attempts), "settled_nusd": int(settled), "open_nusd": int(held)}


def _total(conversations, attempts, settled, held):
    return {"conversations": int(conversations), "attempts": int(attempts), "settled_nusd": int(settled),
            "open_nusd": int(held)}
