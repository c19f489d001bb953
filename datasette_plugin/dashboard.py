"""The spend dashboard at ``/-/llm-accounts`` and its JSON form (docs/architecture.md "Datasette").

``load()`` reads one ledger database; ``summarize()``, ``budget_chart()``, ``daily_chart()`` and
``as_json()`` are pure and turn those rows into what the template draws or a script reads. Money
stays integer nanodollars until it is formatted with ``llm_accounts.money`` (docs/pricing.md
"Money"); the chart geometry is pixels.

Every read is of aggregates: the accounts, their ``month`` rows (running totals), the ``day`` rows
of the credit period and the ``month_outcome`` rows for the last success, never the attempts, so
the page costs the same at any length of history (docs/performance.md).
"""

import dataclasses
import datetime as dt

from llm_accounts import clock, forecast, health, thresholds
from llm_accounts.money import usd, usd_exact, usd_fine

NEAR_BUDGET = (9, 10)
"""Spend at or above 9/10 of a budget is "near": the bound warm-prefix affinity keeps free."""

ACCOUNT_COLOURS = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",  # Okabe-Ito
    "#332288", "#999933", "#882255", "#44AA99", "#000000", "#DDCC77",  # Paul Tol's muted, and black
)
"""Twelve colours before any repeats: Okabe-Ito's six and five of Paul Tol's muted palette, plus
black, chosen to stay apart with the common colour-vision deficiencies. Every bar also carries
its account's name in its tooltip and the table has a swatch, so nothing relies on colour alone."""

ACCOUNTS_SQL = """
with completed as (
  select provider, account, max(last_at) as last_at from month_outcome
  where state = 'settled' and outcome = 'complete' and attempts > 0
  group by provider, account
)
select
  account.provider, account.name, account.rank, account.block_reason, account.removed_at,
  health.state, health.failure_class, health.http_status, health.since, health.last_failure_at,
  health.cooldown_until, health.probe_attempt_id,
  -- The probe in flight: an attempt admitted at or after the dwell's end with no outcome yet
  -- (llm_accounts.health.probe_outstanding; nothing is written to admit one).
  case when health.state = 'failing' then (
    select max(probe.created_at) from attempt as probe
    where probe.state = 'open' and probe.outcome is null and probe.provider = account.provider
      and probe.account = account.name
      and probe.created_at >= coalesce(health.cooldown_until, health.last_failure_at)
  ) end as probe_created_at,
  -- The newest complete settlement is exact; the health row's is refreshed at most every ten
  -- minutes (llm_accounts.health.SUCCESS_REFRESH) and only stands in without one.
  coalesce(completed.last_at, health.last_success_at) as last_success_at
from account
left join health on health.provider = account.provider and health.account = account.name
left join completed on completed.provider = account.provider and completed.account = account.name
order by account.rank, account.name
"""

BUDGETS_SQL = """
select provider, name, month_utc, budget_nusd, daily_budget_nusd
from month where month_utc <= :month
order by month_utc
"""

MONTH_SPEND_SQL = """
select provider, name as account, settled_nusd, open_nusd
from month where month_utc = :month
"""

ADJUSTMENTS_SQL = """
select provider, account, sum(delta_nusd) as delta_nusd
from adjustment where month_utc = :month
group by provider, account
"""

# The thresholds the ledger has warned of this credit period (llm_accounts.thresholds; a routed
# prompt records each as its settlement passes it, docs/architecture.md "Budget warnings").
WARNINGS_SQL = """
select provider, account, max(threshold) as threshold
from budget_warning where month_utc = :month
group by provider, account
"""

DAILY_SPEND_SQL = """
select provider, account, day_utc, settled_nusd, open_nusd
from day where day_utc >= :first_day and day_utc <= :last_day
"""


@dataclasses.dataclass(frozen=True)
class DefaultPrompt:
    """What a plain ``claude-routed`` prompt reserves: its model at its default ``max_tokens``
    and that quote's ceiling (docs/pricing.md "Small budgets")."""

    model: str
    ceiling_nusd: int


def default_prompt():
    """The ``DefaultPrompt`` by the prices in force (shipped, or the user's own), or None when
    the default model is not priced: then no account is marked for it."""
    from llm_accounts.errors import AccountsError
    from llm_accounts.ladder import quote_for
    from llm_accounts.pricing import price_book
    from llm_accounts.pricing.fits import default_model

    model = default_model()
    try:
        return DefaultPrompt(model, quote_for(model, price_book.current()).ceiling_nusd)
    except AccountsError:
        return None


@dataclasses.dataclass
class AccountSummary:
    name: str
    provider: str = "anthropic"
    budget_nusd: int = None
    budget_month: str = None  # the credit period the budget was read from
    daily_budget_nusd: int = None
    settled_nusd: int = 0  # settled attempts plus adjustments (S in docs/architecture.md "Selection")
    open_nusd: int = 0  # ceilings of attempts with unknown outcome (R, same section)
    today_settled_nusd: int = 0
    today_open_nusd: int = 0
    health_state: str = "ok"
    health_view: str = "ok"  # llm_accounts.health.view: ok, cooling, probe_due, probing, auth_failed
    failure_class: str = None
    http_status: int = None
    cooldown_until: str = None
    cooling: bool = False
    block_reason: str = None
    removed: bool = False
    # Machines from which the account is cooling after transport failures: the path from those
    # machines, not the account (docs/architecture.md "Failure classes and health").
    transport_hosts: tuple = ()
    last_success_at: str = None
    forecast: object = None  # llm_accounts.forecast.Forecast, None without a budget
    default_prompt: DefaultPrompt = None  # what a plain claude-routed prompt reserves; None: not asked
    warned_threshold: int = None  # the highest budget warning the ledger said this credit period
    colour: str = ACCOUNT_COLOURS[0]
    places: dict = dataclasses.field(default_factory=dict)  # money field -> decimal places shown

    @property
    def used_nusd(self):
        return self.settled_nusd + self.open_nusd

    @property
    def remaining_nusd(self):
        return None if self.budget_nusd is None else self.budget_nusd - self.used_nusd

    @property
    def today_nusd(self):
        return self.today_settled_nusd + self.today_open_nusd

    @property
    def budget_reached(self):
        return self.budget_nusd is not None and self.used_nusd >= self.budget_nusd

    @property
    def near_budget(self):
        numerator, denominator = NEAR_BUDGET
        return (
            self.budget_nusd is not None
            and not self.budget_reached
            and denominator * self.used_nusd >= numerator * self.budget_nusd
        )

    @property
    def daily_budget_reached(self):
        return self.daily_budget_nusd is not None and self.today_nusd >= self.daily_budget_nusd

    @property
    def default_prompt_refusal(self):
        """Why a plain claude-routed prompt cannot be admitted here now, or None when it can (or
        is not asked about). Admission needs the whole ceiling to fit the room each limit leaves:
        budget less settled spend and open ceilings, and the same for the UTC day
        (docs/architecture.md "Selection"); a blocked account takes nothing."""
        prompt = self.default_prompt
        if prompt is None or self.removed:
            return None
        if self.block_reason:
            return "blocked"
        for left, when in ((self.remaining_nusd, ""), (self.daily_left_nusd, " today")):
            if left is not None and left < prompt.ceiling_nusd:
                left = max(left, 0)
                shown = [usd_fine(left), usd_fine(prompt.ceiling_nusd)]
                if shown[0] == shown[1]:  # as many digits as tell them apart
                    places = max(distinguishing_places([left, prompt.ceiling_nusd]))
                    shown = [usd_shown(left, places), usd_shown(prompt.ceiling_nusd, places)]
                return f"{shown[0]} left{when}, below the {shown[1]} ceiling of {prompt.model}"
        return None

    @property
    def daily_left_nusd(self):
        return None if self.daily_budget_nusd is None else self.daily_budget_nusd - self.today_nusd

    @property
    def budget_warning(self):
        """The budget warning still in force, as words, or None: the highest threshold the
        ledger warned of this credit period that spend (settled plus adjustments; open
        ceilings are held, not spent) is still past (llm_accounts.thresholds.reached)."""
        if self.warned_threshold is None or not self.budget_nusd:
            return None
        if not thresholds.reached(self.settled_nusd, self.budget_nusd, (self.warned_threshold,)):
            return None
        spent = thresholds.percent(self.settled_nusd, self.budget_nusd)
        return f"{spent} % spent, past its {self.warned_threshold} % threshold"

    @property
    def utilization(self):
        """Percent of the budget used, to one decimal, as text (display only)."""
        if not self.budget_nusd:
            return None
        tenths = (1000 * self.used_nusd + self.budget_nusd // 2) // self.budget_nusd
        return f"{tenths // 10}.{tenths % 10}%"

    @property
    def marks(self):
        """``(css class, label)`` for each condition someone should notice, worst first."""
        marks = []
        if self.block_reason:
            marks.append(("bad", f"Blocked: {self.block_reason}"))
        if self.health_state == "failing":
            detail = self.failure_class or "unclassified"
            if self.http_status:
                detail += f", HTTP {self.http_status}"
            if self.health_view == "probe_due":
                # The cooldown is over: the next attempt is admitted as its one probe.
                marks.append(("warn", f"Probe due: {detail}"))
            elif self.health_view == "probing":
                marks.append(("warn", f"Probing: {detail}"))
            else:
                marks.append(("bad", f"Failing: {detail}"))
        if self.budget_reached:
            marks.append(("bad", "Budget reached"))
        elif self.near_budget:
            marks.append(("warn", "Near budget"))
        if self.daily_budget_reached:
            marks.append(("bad", "Daily budget reached"))
        refusal = self.default_prompt_refusal
        if refusal and not self.block_reason:  # a block is marked above, as the reason
            marks.append(("bad", f"Cannot take a plain claude-routed prompt: {refusal}"))
        if self.budget_warning:
            marks.append(("warn", f"Budget warning: {self.budget_warning}"))
        if self.transport_hosts:
            marks.append(("warn", f"Unreachable from {', '.join(self.transport_hosts)} (transport)"))
        if self.removed:
            marks.append(("info", "Removed (llm accounts remove)"))
        return marks

    @property
    def status(self):
        """blocked, cooling, probe_due, probing, failing or ok."""
        if self.block_reason:
            return "blocked"
        if self.health_state == "failing":
            if self.health_view in ("cooling", "probe_due", "probing"):
                return self.health_view
            return "failing"
        return "ok"

    @property
    def worst(self):
        """The css class of the worst mark, or None: what the charts mark the account with."""
        css = {css for css, _ in self.marks}
        return next((level for level in ("bad", "warn") if level in css), None)

    @property
    def pace(self):
        """The forecast as one sentence, with what is left a day (docs/architecture.md "Pace forecast")."""
        if self.forecast is None:
            return None
        left = usd_fine(self.forecast.per_day_left_nusd)
        return f"{forecast.sentence(self.name, self.forecast)}; {left} a day left to last the period"

    def money(self, field, places=2):
        return usd(getattr(self, field), places)

    def shown(self, field):
        """The amount as the table shows it: cents, or more digits where cents would not tell
        this account from another (``distinguishing_places``)."""
        return usd_shown(getattr(self, field), self.places.get(field, 2))


def _key(row, name="name"):
    return (row["provider"], row[name])


def summarize(accounts, budgets, month_spend, adjustments, daily_spend, *, month, day, now, prompt=None,
              warnings=()):
    """One ``AccountSummary`` per ledger account for credit period ``month`` and UTC ``day``.

    An account with no ``month`` row for this period has not been used in it yet: its budget
    is read from its latest earlier period and ``budget_month`` says which. ``prompt`` is the
    ``DefaultPrompt`` each account is asked to have room for; ``warnings`` the ``budget_warning``
    rows of the period (``WARNINGS_SQL``).
    """
    summaries = {}
    for index, row in enumerate(accounts):
        cooling = bool(
            row["state"] == "failing"
            and row["cooldown_until"]
            and _parse(row["cooldown_until"]) > now
        )
        record = _health_record(row)
        probe_taken = health.probe_outstanding(record, _parse_or_none(row["probe_created_at"]), now)
        summaries[_key(row)] = AccountSummary(
            name=row["name"],
            provider=row["provider"],
            health_state=row["state"] or "ok",
            health_view=health.view(record, now, probe_taken),
            failure_class=row["failure_class"],
            http_status=row["http_status"],
            cooldown_until=row["cooldown_until"],
            cooling=cooling,
            block_reason=row["block_reason"],
            removed=row["removed_at"] is not None,
            last_success_at=row["last_success_at"],
            colour=ACCOUNT_COLOURS[index % len(ACCOUNT_COLOURS)],
            default_prompt=prompt,
        )
    for row in warnings:
        summary = summaries.get(_key(row, "account"))
        if summary is not None:
            summary.warned_threshold = row["threshold"]
    for row in budgets:  # ascending month: the latest row up to ``month`` wins
        summary = summaries.get(_key(row))
        if summary is not None:
            summary.budget_nusd = row["budget_nusd"]
            summary.budget_month = row["month_utc"]
            summary.daily_budget_nusd = (
                row["daily_budget_nusd"] if row["month_utc"] == month else None
            )
    for row in month_spend:
        summary = summaries.get(_key(row, "account"))
        if summary is not None:
            summary.settled_nusd += row["settled_nusd"]
            summary.open_nusd += row["open_nusd"]
    for row in adjustments:
        summary = summaries.get(_key(row, "account"))
        if summary is not None:
            summary.settled_nusd += row["delta_nusd"]
    settled_by_day = {}
    for row in daily_spend:
        summary = summaries.get(_key(row, "account"))
        if summary is not None:
            settled_by_day.setdefault(_key(row, "account"), {})[row["day_utc"]] = row["settled_nusd"]
        if summary is not None and row["day_utc"] == day:
            summary.today_settled_nusd += row["settled_nusd"]
            summary.today_open_nusd += row["open_nusd"]
    # The pace forecast, by the rule status uses (docs/architecture.md "Pace forecast").
    for key, summary in summaries.items():
        summary.forecast = forecast.forecast(
            summary.budget_nusd, summary.settled_nusd, summary.open_nusd, settled_by_day.get(key, {}), now
        )
    shown = [
        summary
        for summary in summaries.values()
        if not summary.removed or summary.used_nusd or summary.budget_month == month
    ]
    for field in MONEY_FIELDS:
        for summary, places in zip(shown, distinguishing_places([getattr(s, field) for s in shown])):
            summary.places[field] = places
    return shown


MONEY_FIELDS = ("budget_nusd", "settled_nusd", "open_nusd", "remaining_nusd", "today_nusd", "today_open_nusd", "daily_budget_nusd")
"""The table's money columns, each shown with ``distinguishing_places``."""

PLACES = (2, 3, 4, 5, 6, 7, 8, 9)


def distinguishing_places(values):
    """Decimal places to show each of ``values`` (nanodollars or None) with: cents, unless cents
    would show a non-zero amount as zero, or two different amounts of the column alike; then as
    many digits as tell them apart. ``$0.004`` and ``$0.003`` stay distinct, ``$4.00`` stays short."""
    result = []
    for value in values:
        chosen = 9
        for places in PLACES:
            text = usd(value, places) if value is not None else None
            if value and usd(0, places) in (text, "-" + usd(0, places)):
                continue
            if any(other is not None and other != value and usd(other, places) == text for other in values):
                continue
            chosen = places
            break
        result.append(chosen)
    return result


def usd_shown(nusd, places=2):
    """``usd(nusd, places)`` without trailing zeros past the cents."""
    text = usd(nusd, places)
    if places > 2 and "." in text:
        whole, frac = text.split(".")
        text = f"{whole}.{frac.rstrip('0').ljust(2, '0')}"
    return text


def _parse_or_none(text):
    return None if text is None else _parse(text)


def _health_record(row):
    """The account's ``health`` row as ``llm_accounts.health.Health``, or None without one."""
    if row["state"] is None:
        return None
    return health.Health(
        state=row["state"],
        failure_class=row["failure_class"],
        http_status=row["http_status"],
        since=_parse_or_none(row["since"]),
        last_failure_at=_parse_or_none(row["last_failure_at"]),
        cooldown_until=_parse_or_none(row["cooldown_until"]),
        probe_attempt_id=row["probe_attempt_id"],
    )


def _parse(text):
    try:
        parsed = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed


def _ticks(maximum, count=4):
    """Round tick values in nanodollars from 0 up to at least ``maximum``: 1, 2 or 5 x 10^n."""
    if maximum <= 0:
        return [0]
    step = 1
    while step * count < maximum:
        step = _next_step(step)
    return [step * i for i in range(-(-maximum // step) + 1)]


def _next_step(step):
    """1, 2, 5, 10, 20, 50, ... in nanodollars."""
    digits = str(step)
    lead, zeros = digits[0], len(digits) - 1
    if lead == "1":
        return 2 * 10**zeros
    if lead == "2":
        return 5 * 10**zeros
    return 10 ** (zeros + 1)


def _tick_label(nusd):
    """Whole dollars when the tick is whole, cents otherwise; small ticks keep their digits."""
    for places in (0, 2, 4, 6, 9):
        if nusd % 10 ** (9 - places) == 0:
            return usd(nusd, places)
    return usd(nusd, 9)


@dataclasses.dataclass
class Chart:
    width: int
    height: int
    bars: list  # dicts: x, y, width, height, css, title and, for an account's colour, fill
    labels: list  # dicts: x, y, text, anchor, css
    lines: list  # dicts: x1, y1, x2, y2, css


BUDGET_ROW = 52
BUDGET_LEFT = 130
BUDGET_RIGHT = 300
BUDGET_WIDTH = 1000


def budget_chart(summaries):
    """Horizontal bars: settled spend, then open ceilings stacked, against each budget.

    Every account shares one scale, so bar lengths compare across accounts; a dark tick marks
    each budget.
    """
    rows = [summary for summary in summaries if summary.budget_nusd is not None]
    plot = BUDGET_WIDTH - BUDGET_LEFT - BUDGET_RIGHT
    top = 28
    height = top + BUDGET_ROW * len(rows) + 8
    chart = Chart(BUDGET_WIDTH, height, [], [], [])
    if not rows:
        return chart
    scale = max(max(row.budget_nusd, row.used_nusd) for row in rows)
    ticks = _ticks(scale)
    scale = ticks[-1]

    def x(nusd):
        return BUDGET_LEFT + plot * max(nusd, 0) / scale

    for value in ticks:
        chart.lines.append(dict(x1=x(value), y1=top - 6, x2=x(value), y2=height - 8, css="grid"))
        chart.labels.append(dict(x=x(value), y=top - 10, text=_tick_label(value), anchor="middle", css="tick"))
    for index, row in enumerate(rows):
        y = top + index * BUDGET_ROW + 8
        bar = 22
        chart.labels.append(
            dict(x=BUDGET_LEFT - 10, y=y + bar / 2 + 5, text=row.name, anchor="end", css="name")
        )
        worst = row.worst
        chart.bars.append(
            dict(
                x=BUDGET_LEFT, y=y, width=x(row.budget_nusd) - BUDGET_LEFT, height=bar,
                css=f"budget marked-{worst}" if worst else "budget",
                title=f"{row.name}: budget {row.shown('budget_nusd')}",
            )
        )
        settled_end = x(row.settled_nusd)
        chart.bars.append(
            dict(
                x=BUDGET_LEFT, y=y, width=settled_end - BUDGET_LEFT, height=bar,
                css="settled", title=f"{row.name}: settled {row.shown('settled_nusd')}",
            )
        )
        if row.open_nusd:
            chart.bars.append(
                dict(
                    x=settled_end, y=y, width=x(row.used_nusd) - settled_end, height=bar,
                    css="open", title=f"{row.name}: open ceilings {row.shown('open_nusd')}",
                )
            )
        chart.lines.append(
            dict(x1=x(row.budget_nusd), y1=y - 5, x2=x(row.budget_nusd), y2=y + bar + 5, css="budget-mark")
        )
        used = usd_shown(row.used_nusd, max(row.places.get("settled_nusd", 2), row.places.get("open_nusd", 2)))
        text = f"{used} of {row.shown('budget_nusd')} ({row.utilization})"
        if row.budget_reached:
            text, css = text + " budget reached", "value bad"
        elif row.near_budget:
            text, css = text + " near budget", "value warn"
        else:
            css = "value"
        chart.labels.append(
            dict(x=BUDGET_WIDTH - BUDGET_RIGHT + 14, y=y + bar / 2 + 5, text=text, anchor="start", css=css)
        )
        # Failing, cooling, probe-due, blocked, exhausted: said under the bar too, not only in the table.
        notes = [label for _, label in row.marks if label not in ("Budget reached", "Near budget")]
        if notes:
            chart.labels.append(
                dict(x=BUDGET_LEFT, y=y + bar + 12, text=" · ".join(notes), anchor="start", css=f"mark {worst}")
            )
    return chart


DAILY_WIDTH = 1000
DAILY_HEIGHT = 260
DAILY_LEFT = 70
DAILY_BOTTOM = 40
DAILY_TOP = 16


def period_days(month):
    """Every UTC day of credit period ``month``, in order (docs/architecture.md "Months and days")."""
    start, end = clock.credit_period(month)
    days, day = [], start.date()
    while day < end.date():
        days.append(day.isoformat())
        day += dt.timedelta(days=1)
    return days


def daily_chart(summaries, daily_spend, month, today):
    """Vertical bars per UTC day of the credit period: each account's settled spend stacked
    in its colour, open ceilings hatched on top. Days after ``today`` stay empty."""
    days = period_days(month)
    colours = {(s.provider, s.name): s.colour for s in summaries}
    per_day = {day: [] for day in days}
    open_per_day = {day: 0 for day in days}
    for row in daily_spend:
        key = _key(row, "account")
        if row["day_utc"] in per_day and key in colours:
            if row["settled_nusd"]:
                per_day[row["day_utc"]].append((key, row["settled_nusd"]))
            open_per_day[row["day_utc"]] += row["open_nusd"]
    totals = [sum(v for _, v in per_day[day]) + open_per_day[day] for day in days]
    chart = Chart(DAILY_WIDTH, DAILY_HEIGHT, [], [], [])
    plot_height = DAILY_HEIGHT - DAILY_TOP - DAILY_BOTTOM
    base = DAILY_TOP + plot_height
    slot = (DAILY_WIDTH - DAILY_LEFT - 10) / len(days)
    ticks = _ticks(max(totals)) if max(totals) else [0, 1_000_000_000]
    scale = ticks[-1]

    def h(nusd):
        return plot_height * nusd / scale

    for value in ticks:
        y = base - h(value)
        chart.lines.append(dict(x1=DAILY_LEFT, y1=y, x2=DAILY_WIDTH - 10, y2=y, css="grid"))
        chart.labels.append(dict(x=DAILY_LEFT - 8, y=y + 4, text=_tick_label(value), anchor="end", css="tick"))
    order = {key: index for index, key in enumerate(colours)}
    for index, day in enumerate(days):
        x = DAILY_LEFT + index * slot + slot * 0.15
        width = slot * 0.7
        y = base
        for key, nusd in sorted(per_day[day], key=lambda item: order[item[0]]):
            chart.bars.append(
                dict(x=x, y=y - h(nusd), width=width, height=h(nusd), css="account", fill=colours[key],
                     title=f"{day} {key[1]}: settled {usd_shown(nusd, distinguishing_places([nusd])[0])}")
            )
            y -= h(nusd)
        if open_per_day[day]:
            chart.bars.append(
                dict(x=x, y=y - h(open_per_day[day]), width=width, height=h(open_per_day[day]),
                     css="open", title=f"{day}: open ceilings {usd(open_per_day[day])}")
            )
        if index % 2 == 0 or day == today:
            css = "tick today" if day == today else "tick"
            chart.labels.append(dict(x=x + width / 2, y=base + 16, text=day[8:], anchor="middle", css=css))
    chart.lines.append(dict(x1=DAILY_LEFT, y1=base, x2=DAILY_WIDTH - 10, y2=base, css="axis"))
    return chart


# Token use per client and account this credit period, for client token caps (docs/architecture.md
# "Client caps"): billed tokens of settled attempts and token ceilings of open ones. Only attempts
# with a client label are read, on the partial attempt_client index.
CLIENT_TOKENS_SQL = """
select provider, account, client, tokens as tokens_used, open_tokens as tokens_open
from month_client where month_utc = :month and attempts > 0
order by account, client
"""


async def client_tokens(db, params):
    """Rows of ``CLIENT_TOKENS_SQL``, from the ``month_client`` totals (kept by the attempt
    triggers, llm_accounts/schema.py); none from a ledger older than them."""
    tables = {row[0] for row in (await db.execute("select name from sqlite_master where type = 'table'")).rows}
    if "month_client" not in tables:
        return []
    return [dict(row) for row in (await db.execute(CLIENT_TOKENS_SQL, params)).rows]


# Dollars per requested model and per client label this credit period (issue 23, docs/architecture.md
# "Spend"), summed over accounts from the month_model and month_client totals: settled spend and
# held ceilings side by side, never added together.
def _spend_by_sql(table, column):
    return f"""
select {column} as key, sum(attempts) as attempts, sum(settled_nusd) as settled_nusd,
       sum(open_nusd) as open_nusd
from {table} where month_utc = :month
group by {column} having sum(attempts) > 0
order by sum(settled_nusd) + sum(open_nusd) desc, {column}
"""


MODEL_SPEND_SQL = _spend_by_sql("month_model", "model")
CLIENT_SPEND_SQL = _spend_by_sql("month_client", "client")


async def spend_by(db, params, table, sql):
    """Rows of ``sql`` (``MODEL_SPEND_SQL`` or ``CLIENT_SPEND_SQL``) over ``table``, with the money as shown (amounts in one panel
    keep the digits that tell them apart); none from a ledger older than the table."""
    tables = {row[0] for row in (await db.execute("select name from sqlite_master where type = 'table'")).rows}
    if table not in tables:
        return []
    rows = [dict(row) for row in (await db.execute(sql, params)).rows]
    amounts = [row["settled_nusd"] for row in rows] + [row["open_nusd"] for row in rows]
    places = dict(zip(amounts, distinguishing_places(amounts)))
    for row in rows:
        row["settled"] = usd_shown(row["settled_nusd"], places[row["settled_nusd"]])
        row["open_ceilings"] = usd_shown(row["open_nusd"], places[row["open_nusd"]])
    return rows


WARM_SQL = """
select provider, account, bound_warm, bound_cold, cache_saved_nusd
from warm_month where month_utc = :month
order by account
"""


async def warm_prefixes(db, params):
    """This credit period's ``warm_month`` rows (docs/architecture.md "Warm prefixes"): new
    conversations with a one-hour prefix that bound warm or cold, and what cache reads saved.
    One row per account; none from a ledger older than the table."""
    tables = {row[0] for row in (await db.execute("select name from sqlite_master where type = 'table'")).rows}
    if "warm_month" not in tables:
        return []
    rows = [dict(row) for row in (await db.execute(WARM_SQL, params)).rows]
    for row in rows:
        row["cache_saved"] = usd_shown(row["cache_saved_nusd"], 6)
    return rows


HOSTS_SQL = """
select provider, account, host, cooldown_until from host_health
where state = 'failing' and failure_class = 'transport'
order by host
"""


async def transport_hosts(db, summaries, now):
    """Mark each account with the machines it is cooling from after transport failures; none
    from a ledger older than ``host_health``."""
    tables = {row[0] for row in (await db.execute("select name from sqlite_master where type = 'table'")).rows}
    if "host_health" not in tables:
        return
    by_key = {(summary.provider, summary.name): summary for summary in summaries}
    for row in (await db.execute(HOSTS_SQL)).rows:
        summary = by_key.get((row["provider"], row["account"]))
        if summary is not None and row["cooldown_until"] and _parse(row["cooldown_until"]) > now:
            summary.transport_hosts += (row["host"],)


async def load(db, now):
    """Everything the dashboard shows for ledger database ``db`` at instant ``now``."""
    month, day = clock.credit_month(now), clock.utc_day(now)
    days = period_days(month)
    params = {"month": month, "first_day": days[0], "last_day": days[-1]}
    accounts = (await db.execute(ACCOUNTS_SQL)).rows
    budgets = (await db.execute(BUDGETS_SQL, params)).rows
    month_spend = (await db.execute(MONTH_SPEND_SQL, params)).rows
    adjustments = (await db.execute(ADJUSTMENTS_SQL, params)).rows
    daily_spend = (await db.execute(DAILY_SPEND_SQL, params)).rows
    tables = {row[0] for row in (await db.execute("select name from sqlite_master where type = 'table'")).rows}
    # A ledger older than budget_warning has warned of nothing yet.
    warnings = (await db.execute(WARNINGS_SQL, params)).rows if "budget_warning" in tables else ()
    prompt = default_prompt()
    summaries = summarize(
        accounts, budgets, month_spend, adjustments, daily_spend, month=month, day=day, now=now,
        prompt=prompt, warnings=warnings,
    )
    await transport_hosts(db, summaries, now)
    start, end = clock.credit_period(month)
    return {
        "name": db.name,
        "month": month,
        "day": day,
        "period_start": start.date().isoformat(),
        "period_last_day": (end - dt.timedelta(days=1)).date().isoformat(),
        "accounts": summaries,
        "default_prompt": prompt,
        "has_adjustments": any(row["delta_nusd"] for row in adjustments),
        "budget_chart": budget_chart(summaries),
        "daily_chart": daily_chart(summaries, daily_spend, month, day),
        "daily_spend": daily_spend,
        "client_tokens": await client_tokens(db, params),
        "model_spend": await spend_by(db, params, "month_model", MODEL_SPEND_SQL),
        "client_spend": await spend_by(db, params, "month_client", CLIENT_SPEND_SQL),
        "warm_prefix": await warm_prefixes(db, params),
    }


def _money(nusd):
    """An amount for scripts: integer nanodollars and the exact decimal USD string."""
    return {"nusd": nusd, "usd": usd_exact(nusd)}


def _spend_row(row, label):
    return {label: row["key"], "attempts": row["attempts"], "settled": _money(row["settled_nusd"]),
            "open_ceilings": _money(row["open_nusd"])}


def _forecast_json(summary):
    f = summary.forecast
    if f is None:
        return None
    return {
        "state": f.state,
        "runs_out_on": f.runs_out_on,
        "resets_on": f.resets_on,
        "window_start": f.window_start,
        "rate_per_day": _money(f.rate_nusd_per_day),
        "per_day_left": _money(f.per_day_left_nusd),
        "sentence": forecast.sentence(summary.name, f),
    }


def as_json(ledger):
    """The figures of one ledger's dashboard for ``/-/llm-accounts.json`` (docs/datasette.md).

    Money is integer nanodollars beside an exact decimal US dollar string; days are UTC."""
    accounts = []
    for summary in ledger["accounts"]:
        accounts.append(
            {
                "account": summary.name,
                "provider": summary.provider,
                "status": summary.status,
                "health": summary.health_view,
                "failure_class": summary.failure_class,
                "http_status": summary.http_status,
                "cooldown_until": summary.cooldown_until,
                "block_reason": summary.block_reason,
                "removed": summary.removed,
                "marks": [{"level": css, "label": label} for css, label in summary.marks],
                # None: not asked (the default model is unpriced, or the account removed).
                "takes_default_prompt": None if summary.default_prompt is None or summary.removed
                else summary.default_prompt_refusal is None,
                "budget_warning_threshold": summary.warned_threshold if summary.budget_warning else None,
                "colour": summary.colour,
                "budget": _money(summary.budget_nusd),
                "budget_credit_period": summary.budget_month,
                "settled": _money(summary.settled_nusd),
                "open_ceilings": _money(summary.open_nusd),
                "remaining": _money(summary.remaining_nusd),
                "utilization": summary.utilization,
                "today_settled": _money(summary.today_settled_nusd),
                "today_open_ceilings": _money(summary.today_open_nusd),
                "daily_budget": _money(summary.daily_budget_nusd),
                "last_success_at": summary.last_success_at,
                "forecast": _forecast_json(summary),
            }
        )
    names = {(s.provider, s.name) for s in ledger["accounts"]}
    per_day = {day: {} for day in period_days(ledger["month"])}
    for row in ledger["daily_spend"]:
        key = _key(row, "account")
        if key in names and row["day_utc"] in per_day:
            per_day[row["day_utc"]][row["account"]] = {
                "settled": _money(row["settled_nusd"]),
                "open_ceilings": _money(row["open_nusd"]),
            }
    return {
        "database": ledger["name"],
        "credit_period": ledger["month"],
        "default_prompt": None if ledger["default_prompt"] is None else {
            "model": ledger["default_prompt"].model, "ceiling": _money(ledger["default_prompt"].ceiling_nusd),
        },
        "period_start": ledger["period_start"],
        "period_last_day": ledger["period_last_day"],
        "day": ledger["day"],
        "accounts": accounts,
        "days": [{"day": day, "accounts": spend} for day, spend in per_day.items()],
        "client_tokens": [
            {key: row[key] for key in ("account", "client", "tokens_used", "tokens_open")}
            for row in ledger.get("client_tokens", ())
        ],
        "model_spend": [_spend_row(row, "model") for row in ledger.get("model_spend", ())],
        "client_spend": [_spend_row(row, "client") for row in ledger.get("client_spend", ())],
        "queries": [{"name": q["name"], "title": q["title"], "url": q["url"]} for q in ledger.get("queries", ())],
        "warm_prefix": [
            {
                "account": row["account"],
                "bound_warm": row["bound_warm"],
                "bound_cold": row["bound_cold"],
                "cache_saved": _money(row["cache_saved_nusd"]),
            }
            for row in ledger.get("warm_prefix", ())
        ],
    }


SHAPES = (None, "objects", "array", "arrays")
"""``_shape`` values of ``/-/llm-accounts.json`` (docs/datasette.md); None is the whole document."""


def shaped(document, shape):
    """``document`` (the JSON view's) in Datasette's ``_shape`` conventions, its accounts as the
    rows, each naming its ``database``."""
    if shape is None:
        return document
    rows = [
        {"database": ledger["database"], **account}
        for ledger in document["ledgers"]
        for account in ledger.get("accounts", ())
    ]
    if shape == "array":
        return rows
    if shape == "objects":
        return {"ok": True, "now": document["now"], "rows": rows}
    columns = list(rows[0]) if rows else ["database", "account"]
    return {"ok": True, "now": document["now"], "columns": columns, "rows": [[row[c] for c in columns] for row in rows]}
