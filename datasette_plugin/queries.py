"""The ledger's canned queries: the one definition of their SQL (docs/architecture.md "Datasette").

The plugin registers these on every database that holds the ledger's tables, and
``metadata.yml`` at the top of the repository is generated from ``metadata()`` with cog, so
``datasette ledger.db -m metadata.yml`` serves the same queries without the plugin.

Money columns are integer nanodollars (docs/pricing.md "Money"). Each query shows them as exact
decimal US dollar strings made with SQLite integer arithmetic; no money passes through REAL.
Every query is a single SELECT: none writes. Optional parameters are written
``(:p = '' or col = :p)``, since Datasette passes a missing parameter as the empty string.

None sums attempt rows, so each costs the same at a thousand attempts or ten million
(docs/performance.md "Spend views at any length of history"): spend comes from the running
totals the ledger keeps in ``month`` and ``day``, counts by outcome from ``month_outcome``, spend
by model, client and conversation from ``month_model``, ``month_client`` and ``month_conversation``
(all kept by triggers in the transaction that writes the attempt, llm_accounts/schema.py); the
conversations, as many as a third of the attempts, are read from an index in the order shown and
only up to the query's limit; and the one query that lists attempts walks the partial
``attempt_open`` index a page at a time.
"""

OPEN_PAGE = 100
"""Rows per page of ``open_attempts``: the next page starts after the last ``attempt_id`` shown."""

import dataclasses

LEDGER_TABLES = ("account", "month", "attempt")
"""A database holding these tables is a ledger."""

TOTALS_TABLES = ("day", "month_outcome", "month_client", "month_model", "month_conversation")
"""The totals the queries read. A ledger written by an older llm-accounts gains them (filled from
its rows) the next time any ``llm accounts`` command opens it; until then it gets no queries."""

GAINED_TABLES = TOTALS_TABLES + ("host_health",)
"""Every table the queries read that a ledger gains on open: the totals, and the per-machine
health ``health`` lists (docs/architecture.md "Failure classes and health")."""

DATABASE_NAMES = ("accounts-ledger", "ledger")
"""Database names ``metadata.yml`` covers: the default ledger file and ``ledger.db``."""


def usd_sql(column):
    """SQL showing integer nanodollars ``column`` as an exact decimal USD string.

    ``-1500000000`` becomes ``'-1.500000000'``; NULL stays NULL. ``column`` is a plain column
    name from an inner query, since the expression repeats it.
    """
    # The sign's CASE has no ELSE, so a NULL amount makes the whole concatenation NULL.
    return (
        f"case when {column} < 0 then '-' when {column} >= 0 then '' end"
        f" || printf('%d.%09d', abs({column}) / 1000000000, abs({column}) % 1000000000)"
    )


_MINUTES = "cast((julianday('now') - julianday(created_at)) * 1440 as integer)"
"""How long an open attempt has been open, in whole minutes."""


@dataclasses.dataclass(frozen=True)
class Query:
    name: str
    title: str
    description: str
    sql: str
    params: tuple = ()
    # Datasette 1.0 alphas route /db/<name> to a table before a stored query of the same name,
    # so a query named like a ledger table is registered there under this alias instead.
    alias: str = None

    @property
    def unshadowed_name(self):
        """The name no ledger table shadows on any Datasette: what the 1.0 alphas and
        ``metadata.yml`` (read by either) list the query by, once."""
        return self.alias or self.name

    def as_metadata(self):
        """The query as Datasette 0.65 metadata (``databases: <db>: queries: <name>:``).

        ``hide_sql``: a query page opens on its results, the SQL one click away."""
        data = {"title": self.title, "description": self.description, "sql": self.sql, "hide_sql": True}
        if self.params:
            data["params"] = list(self.params)
        return data


SPEND_BY_MONTH = Query(
    name="spend_by_month",
    title="Spend by credit period",
    description=(
        "Budget, settled spend (settled attempts plus adjustments), open ceilings, remaining "
        "budget and utilization for each account and credit period, in US dollars to the "
        "nanodollar. A credit period runs from 00:00 UTC on the last day of the previous "
        "calendar month. Open ceilings are reserved for attempts whose outcome is not known yet."
    ),
    params=("account", "month"),
    sql=f"""with spend as (
  select
    month.name as account,
    month.month_utc,
    month.budget_nusd,
    month.settled_nusd + coalesce((
      select sum(delta_nusd) from adjustment
      where adjustment.provider = month.provider and adjustment.account = month.name
        and adjustment.month_utc = month.month_utc
    ), 0) as settled_nusd,
    month.open_nusd
  from month
  where (:account = '' or month.name = :account)
    and (:month = '' or month.month_utc = :month)
),
totals as (
  select *, budget_nusd - settled_nusd - open_nusd as remaining_nusd from spend
)
select
  account,
  month_utc as credit_period,
  {usd_sql("budget_nusd")} as budget_usd,
  {usd_sql("settled_nusd")} as settled_usd,
  {usd_sql("open_nusd")} as open_ceilings_usd,
  {usd_sql("remaining_nusd")} as remaining_usd,
  round(100.0 * (settled_nusd + open_nusd) / budget_nusd, 2) as utilization_percent
from totals
order by credit_period desc, account""",
)

SPEND_TODAY = Query(
    name="spend_today",
    title="Spend today (UTC)",
    description=(
        "Settled spend and open ceilings per account on one UTC calendar day (today unless "
        "a day is given as YYYY-MM-DD), against the account's daily budget for that day's "
        "credit period. Days are UTC; the daily budget resets at 00:00 UTC."
    ),
    params=("account", "day"),
    sql=f"""with chosen as (
  select coalesce(nullif(:day, ''), date('now')) as day_utc
),
period as (
  select day_utc, strftime('%Y-%m', day_utc, '+1 day') as month_utc from chosen
),
totals as (
  select
    account.name as account,
    period.day_utc,
    month.daily_budget_nusd,
    coalesce(today.attempts, 0) as attempts,
    coalesce(today.settled_nusd, 0) as settled_nusd,
    coalesce(today.open_nusd, 0) as open_nusd,
    month.daily_budget_nusd - coalesce(today.settled_nusd, 0) - coalesce(today.open_nusd, 0)
      as remaining_nusd
  from account
  join period
  left join month on month.provider = account.provider
    and month.name = account.name and month.month_utc = period.month_utc
  left join day as today on today.day_utc = period.day_utc
    and today.provider = account.provider and today.account = account.name
  where (:account = '' or account.name = :account)
    and (account.removed_at is null or today.attempts > 0)
)
select
  account,
  day_utc as day,
  attempts,
  {usd_sql("settled_nusd")} as settled_usd,
  {usd_sql("open_nusd")} as open_ceilings_usd,
  {usd_sql("daily_budget_nusd")} as daily_budget_usd,
  {usd_sql("remaining_nusd")} as remaining_today_usd
from totals
order by account""",
)

OPEN_ATTEMPTS = Query(
    name="open_attempts",
    title="Open attempts",
    description=(
        "Attempts whose outcome is unknown (a 5xx, a transport failure after the request left, "
        "a broken stream, a cancellation, or a process that stopped mid-request), oldest first. "
        "Each keeps its ceiling reserved against the budget until it is reconciled with "
        "'llm accounts reconcile'. An empty outcome means none was recorded yet. "
        f"{OPEN_PAGE} per page, in the order they were admitted: for the next page, give the "
        "last attempt_id shown as 'after'."
    ),
    params=("account", "after"),
    sql=f"""select
  id as attempt_id,
  account,
  month_utc as credit_period,
  created_at,
  printf('%dd %02dh %02dm', {_MINUTES} / 1440, {_MINUTES} % 1440 / 60, {_MINUTES} % 60) as open_for,
  requested_model,
  outcome,
  failure_class,
  http_status,
  {usd_sql("ceiling_nusd")} as ceiling_usd,
  client
from attempt
where state = 'open' and (:account = '' or account = :account)
  and (:after = '' or rowid > (select rowid from attempt where id = :after))
order by rowid
limit {OPEN_PAGE}""",
)

ATTEMPTS_BY_OUTCOME = Query(
    name="attempts_by_outcome",
    title="Attempts by outcome",
    description=(
        "Attempts per account, credit period, state and outcome, with their settled cost and "
        "the ceilings still held open. A refusal proven not billed settles at zero."
    ),
    params=("account", "month"),
    sql=f"""with grouped as (
  select
    account,
    month_utc,
    state,
    nullif(outcome, '') as outcome,
    sum(attempts) as attempts,
    sum(cost_nusd) as cost_nusd,
    sum(open_nusd) as open_nusd
  from month_outcome
  where (:account = '' or account = :account) and (:month = '' or month_utc = :month)
  group by provider, account, month_utc, state, month_outcome.outcome
  having sum(attempts) > 0
)
select
  account,
  month_utc as credit_period,
  state,
  outcome,
  attempts,
  {usd_sql("cost_nusd")} as cost_usd,
  {usd_sql("open_nusd")} as open_ceilings_usd
from grouped
order by credit_period desc, account, attempts desc, state, outcome""",
)

REJECTION_CLASSES = Query(
    name="rejection_classes",
    title="Rejections by class",
    description=(
        "Refused attempts per account and credit period, by the provider's documented error "
        "type and the rejection class, with when the latest was recorded. Only these closed-set values are stored "
        "(docs/errors.md \"Rejection classes\"); the provider's message never is."
    ),
    params=("account", "month"),
    sql="""select
  account,
  month_utc as credit_period,
  nullif(provider_error_type, '') as provider_error_type,
  nullif(rejection_class, '') as rejection_class,
  sum(attempts) as attempts,
  group_concat(distinct nullif(http_status, 0)) as http_statuses,
  max(last_at) as last_at
from month_outcome
where (provider_error_type != '' or rejection_class != '')
  and attempts > 0
  and (:account = '' or account = :account)
  and (:month = '' or month_utc = :month)
group by provider, account, month_utc, month_outcome.provider_error_type, month_outcome.rejection_class
order by credit_period desc, account, attempts desc, provider_error_type, rejection_class""",
)

WARM_PREFIXES = Query(
    name="warm_prefixes",
    title="Warm prompt prefixes",
    description=(
        "Stable prompt prefixes believed cached at an account (docs/architecture.md \"Warm prefixes\"): "
        "a new conversation with the same prefix prefers that account while the entry is live. "
        "Lapsed entries are kept until the ledger purges them. The certificate is shortened "
        "to 12 characters."
    ),
    params=("account",),
    sql="""select
  account,
  substr(cert, 1, 12) as cert,
  case when julianday(expires_at) > julianday('now') then 'live' else 'lapsed' end as status,
  expires_at,
  stable_tokens
from warm_prefix
where (:account = '' or account = :account)
order by status = 'lapsed', expires_at desc, account, cert""",
)

HEALTH = Query(
    name="health",
    alias="account_health",
    title="Account health",
    description=(
        "Each account's health: ok, failing (with its failure class and HTTP status), cooling "
        "until its cooldown ends, or blocked until 'llm accounts unblock'. An account with no "
        "health row has never failed. Failing hosts: the machines that cannot reach the provider "
        "with this account (transport failures count per machine; '(cooling)' while that "
        "machine's cooldown runs); the account stays open to every other machine."
    ),
    params=("account",),
    sql="""with hosts as (
  select provider, account, group_concat(label, ', ') as failing_hosts
  from (
    select provider, account,
      host || case when julianday(cooldown_until) > julianday('now') then ' (cooling)' else '' end as label
    from host_health
    where state = 'failing'
    order by provider, account, host
  )
  group by provider, account
)
select
  account.name as account,
  case
    when account.block_reason is not null then 'blocked'
    when health.state = 'failing' and julianday(health.cooldown_until) > julianday('now')
      then 'cooling'
    else coalesce(health.state, 'ok')
  end as status,
  account.block_reason,
  health.failure_class,
  health.http_status,
  health.since,
  health.last_failure_at,
  health.last_success_at,
  health.cooldown_until,
  health.probe_attempt_id,
  hosts.failing_hosts,
  account.removed_at
from account
left join health on health.provider = account.provider and health.account = account.name
left join hosts on hosts.provider = account.provider and hosts.account = account.name
where (:account = '' or account.name = :account)
order by account.rank, account.name""",
)

def _spend_by(name, title, description, table, column, label, *, limit=None):
    """A spend-by-dimension query over one of the per-period totals tables: settled spend and
    held ceilings side by side, never summed (docs/architecture.md "Spend")."""
    return Query(
        name=name,
        title=title,
        description=description + (
            " Settled is what settled attempts cost; open ceilings are held for attempts whose "
            "outcome is not known yet, and are not spent. Filter by account and credit period "
            "(YYYY-MM)."
        ),
        params=("account", "month"),
        sql=f"""with grouped as (
  select
    month_utc,
    {column} as {label},
    sum(attempts) as attempts,
    sum(settled_nusd) as settled_nusd,
    sum(open_nusd) as open_nusd
  from {table}
  where (:account = '' or account = :account) and (:month = '' or month_utc = :month)
  group by month_utc, {column}
  having sum(attempts) > 0
)
select
  month_utc as credit_period,
  {label},
  attempts,
  {usd_sql("settled_nusd")} as settled_usd,
  {usd_sql("open_nusd")} as open_ceilings_usd
from grouped
order by credit_period desc, settled_nusd + open_nusd desc, {label}""" + (f"\nlimit {limit}" if limit else ""),
    )


SPEND_BY_MODEL = _spend_by(
    "spend_by_model", "Spend by model",
    "Attempts, settled spend and open ceilings per credit period and requested model.",
    "month_model", "model", "model",
)

SPEND_BY_CLIENT = _spend_by(
    "spend_by_client", "Spend by client",
    "Attempts, settled spend and open ceilings per credit period and client label "
    "(LLM_ACCOUNTS_CLIENT); attempts without a label are not listed.",
    "month_client", "client", "client",
)

CONVERSATIONS_SHOWN = 1000
"""Default rows of ``spend_by_conversation`` (its ``limit``), Datasette's own default cap on the rows a
query returns (``max_returned_rows``)."""

_TOP_CONVERSATIONS = """select * from (
    select month_utc, account, conversation, attempts, settled_nusd, open_nusd
    from month_conversation
    where {where}
      and month_utc between coalesce(nullif(:month, ''), '0000-00') and coalesce(nullif(:month, ''), '9999-99')
      and attempts > 0
    order by month_utc desc, settled_nusd + open_nusd desc, {order}conversation
    limit cast(coalesce(nullif(:limit, ''), {shown}) as integer)
    offset cast(coalesce(nullif(:offset, ''), 0) as integer)
  )"""

SPEND_BY_CONVERSATION = Query(
    name="spend_by_conversation",
    title="Spend by conversation",
    description=(
        "Attempts, settled spend and open ceilings per credit period, account and llm conversation id "
        "('llm logs --cid ID' shows a conversation), the costliest first (settled plus held): "
        f"the first 'limit' rows (default {CONVERSATIONS_SHOWN}, also Datasette's cap on rows "
        "returned), after skipping 'offset' rows (default 0): give offset=1000 for the next "
        f"{CONVERSATIONS_SHOWN}. 'llm accounts spend --by conversation' says how many a period holds. "
        "A conversation moved to another account has a row per account. Settled is what settled "
        "attempts cost; open ceilings are held for attempts whose outcome is not known yet, and are "
        "not spent. Filter by account and credit period (YYYY-MM)."
    ),
    params=("account", "month", "limit", "offset"),
    # Two branches, one per index (llm_accounts/schema.py "month_conversation_top"): the one whose
    # account condition is false is skipped whole; the other walks its index in order and stops
    # at the limit, so the query reads limit + offset rows however many conversations there are.
    sql=f"""with top as (
  {_TOP_CONVERSATIONS.format(where=":account = ''", order="account, ", shown=CONVERSATIONS_SHOWN)}
  union all
  {_TOP_CONVERSATIONS.format(where="account = :account", order="", shown=CONVERSATIONS_SHOWN)}
)
select
  month_utc as credit_period,
  account,
  conversation,
  attempts,
  {usd_sql("settled_nusd")} as settled_usd,
  {usd_sql("open_nusd")} as open_ceilings_usd
from top
order by credit_period desc, settled_nusd + open_nusd desc, account, conversation""",
)


QUERIES = (
    SPEND_BY_MONTH,
    SPEND_TODAY,
    OPEN_ATTEMPTS,
    ATTEMPTS_BY_OUTCOME,
    SPEND_BY_MODEL,
    SPEND_BY_CLIENT,
    SPEND_BY_CONVERSATION,
    REJECTION_CLASSES,
    WARM_PREFIXES,
    HEALTH,
)


def canned_queries():
    """``{name: {title, description, sql, params}}``, as the 0.65 ``canned_queries`` hook wants.

    Each query once, by its name: 0.65 serves a canned query before a table of the same name.
    """
    return {query.name: query.as_metadata() for query in QUERIES}


def metadata():
    """The whole of ``metadata.yml``: the queries under each usual ledger database name.

    Datasette 0.65 reads it with ``-m metadata.yml``; the 1.0 alphas moved queries to the
    configuration file, and read the same file with ``-c metadata.yml``.
    """
    return {
        "title": "llm-accounts ledger",
        "description": "Spend, budgets and health of the accounts llm-accounts routes across.",
        "databases": {
            name: {"queries": {query.unshadowed_name: query.as_metadata() for query in QUERIES}}
            for name in DATABASE_NAMES
        },
    }


def metadata_yaml():
    """``metadata()`` as YAML with block-style SQL, for the cog block in ``metadata.yml``."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    def text(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(metadata(), Dumper=Dumper, sort_keys=False, width=100, allow_unicode=True)
