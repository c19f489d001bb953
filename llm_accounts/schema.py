"""The ledger's tables, schema version 3.

Money columns are integer nanodollars. Times are ``isoformat()`` of aware UTC datetimes, so they
sort in time order as text. No prompt, body, header, key, key length or key fingerprint is stored.

``TABLES`` is applied with ``CREATE ... IF NOT EXISTS`` whenever an open finds something missing,
and ``COLUMNS`` lists columns added after a table was first shipped, so a ledger made by an older
build gains them on open without losing rows (``BACKFILL`` fills the month totals from its rows).
A version-1 or version-2 file must already hold ``BASE_TABLES``; ``llm_accounts.ledger`` does
the opening, under the write lock, and refuses anything else.

Versions: 1 is the first shipped schema; 2 adds ``model_health`` (a model that answered 404 cools
on its account, not the whole account); 3 adds ``waiter`` (prompts waiting for room, in arrival
order: docs/architecture.md "Waiting for room"). Opening an older file creates what the newer
versions add and sets the version, keeping every row; nothing is ever reset.
"""

import sqlite3

VERSION = 3
# Versions an open accepts and brings up to ``VERSION`` (0: a file this build is creating).
MIGRATES_FROM = (0, 1, 2)

TABLES = """
CREATE TABLE IF NOT EXISTS account (
    provider      TEXT NOT NULL,
    name          TEXT NOT NULL,
    key_env       TEXT NOT NULL,
    rank          INTEGER NOT NULL DEFAULT 0,
    weight        INTEGER NOT NULL DEFAULT 1,
    block_reason  TEXT,            -- NULL, or a code: auth_failed, settlement_conflict, ceiling_exceeded, manual
    blocked_at    TEXT,
    removed_at    TEXT,            -- declared no more: excluded from new work, history kept
    created_at    TEXT NOT NULL,
    PRIMARY KEY (provider, name)
);

CREATE TABLE IF NOT EXISTS month (
    provider           TEXT NOT NULL,
    name               TEXT NOT NULL,
    month_utc          TEXT NOT NULL,   -- credit period key YYYY-MM
    budget_nusd        INTEGER NOT NULL CHECK (budget_nusd > 0),
    daily_budget_nusd  INTEGER CHECK (daily_budget_nusd IS NULL OR daily_budget_nusd > 0),
    key_env            TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    PRIMARY KEY (provider, name, month_utc),
    FOREIGN KEY (provider, name) REFERENCES account (provider, name)
);

CREATE TABLE IF NOT EXISTS binding (
    scope_kind  TEXT NOT NULL,      -- conversation | prompt (instance: before 2026-12)
    scope_id    TEXT NOT NULL,
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (scope_kind, scope_id, provider),
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);

CREATE TABLE IF NOT EXISTS attempt (
    id                   TEXT PRIMARY KEY,
    scope_kind           TEXT NOT NULL,
    scope_id             TEXT NOT NULL,
    provider             TEXT NOT NULL,
    account              TEXT NOT NULL,
    month_utc            TEXT NOT NULL,
    day_utc              TEXT NOT NULL,
    ceiling_nusd         INTEGER NOT NULL CHECK (ceiling_nusd >= 0),
    price_revision       TEXT NOT NULL,
    requested_model      TEXT NOT NULL,
    served_model         TEXT,
    request_digest       TEXT NOT NULL,   -- sha256 of the credential-free request bytes
    client               TEXT,
    llm_response_id      TEXT,
    state                TEXT NOT NULL CHECK (state IN ('open', 'settled')),
    outcome              TEXT,
    provider_error_type  TEXT,
    rejection_class      TEXT,
    failure_class        TEXT,
    http_status          INTEGER,
    cost_nusd            INTEGER,
    usage_json           TEXT,            -- numeric usage only
    request_id           TEXT,
    created_at           TEXT NOT NULL,
    settled_at           TEXT,
    CHECK ((state = 'open' AND cost_nusd IS NULL) OR (state = 'settled' AND cost_nusd >= 0)),
    FOREIGN KEY (provider, account, month_utc) REFERENCES month (provider, name, month_utc)
);
-- Admission reads the month row's running totals, not sums over attempts, so attempts carry no
-- per-account index over all rows: each one is pages to journal and write on every reservation
-- (bench/ledger.py). Only open attempts are indexed, and an attempt leaves these on settlement.
CREATE INDEX IF NOT EXISTS attempt_open ON attempt (state) WHERE state = 'open';
-- One account's open attempts: the half-open probe's lookup and a refusal's open counts read
-- them, and attempts left open with an unknown outcome pile up until reconciled, so a scan of
-- every open attempt would grow with history (docs/performance.md "Spend views at any length of history").
CREATE INDEX IF NOT EXISTS attempt_open_account ON attempt (provider, account, created_at) WHERE state = 'open';
-- Per-client caps (docs/architecture.md "Client caps"): admission sums one client's attempts on one
-- account in one credit period. Partial, so an attempt without a client label costs no index write.
CREATE INDEX IF NOT EXISTS attempt_client ON attempt (provider, account, month_utc, client)
    WHERE client IS NOT NULL;

CREATE TABLE IF NOT EXISTS adjustment (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('correction', 'reconciliation', 'unblock', 'block', 'rebind')),
    attempt_id  TEXT REFERENCES attempt (id),
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    month_utc   TEXT,
    delta_nusd  INTEGER NOT NULL DEFAULT 0,
    source_ref  TEXT NOT NULL,
    detail      TEXT,             -- closed-set values only (a scope id for rebind, a code for block)
    created_at  TEXT NOT NULL,
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);
CREATE INDEX IF NOT EXISTS adjustment_account_month ON adjustment (provider, account, month_utc);

CREATE TABLE IF NOT EXISTS warm_prefix (
    provider       TEXT NOT NULL,
    account        TEXT NOT NULL,
    cert           TEXT NOT NULL,
    stable_tokens  INTEGER,
    expires_at     TEXT NOT NULL,
    PRIMARY KEY (provider, account, cert),
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);
CREATE INDEX IF NOT EXISTS warm_prefix_cert ON warm_prefix (provider, cert);
CREATE INDEX IF NOT EXISTS warm_prefix_expiry ON warm_prefix (provider, expires_at);

CREATE TABLE IF NOT EXISTS health (
    provider          TEXT NOT NULL,
    account           TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('ok', 'failing')),
    failure_class     TEXT,
    http_status       INTEGER,
    since             TEXT,
    last_failure_at   TEXT,
    last_success_at   TEXT,
    cooldown_until    TEXT,
    probe_attempt_id  TEXT,
    PRIMARY KEY (provider, account),
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);

-- Version 2: a model the provider said is not available to an account (model_unavailable, a 404)
-- cools on that account only; other models still route there. One row per model that failed.
CREATE TABLE IF NOT EXISTS model_health (
    provider          TEXT NOT NULL,
    account           TEXT NOT NULL,
    model             TEXT NOT NULL,   -- the requested model id, as quoted
    since             TEXT NOT NULL,
    last_failure_at   TEXT NOT NULL,
    cooldown_until    TEXT NOT NULL,
    PRIMARY KEY (provider, account, model),
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);

-- The budget thresholds already warned of (docs/architecture.md "Budget warnings"): one row per
-- account, credit period and threshold, so a warning is said once across every process.
CREATE TABLE IF NOT EXISTS budget_warning (
    provider    TEXT NOT NULL,
    account     TEXT NOT NULL,
    month_utc   TEXT NOT NULL,
    threshold   INTEGER NOT NULL CHECK (threshold BETWEEN 1 AND 100),
    spent_nusd  INTEGER NOT NULL,
    warned_at   TEXT NOT NULL,
    PRIMARY KEY (provider, account, month_utc, threshold)
);

-- The provider pass's claim on an organization's usage report (docs/architecture.md "Settling
-- from the provider"): the Admin API asks for at most one poll a minute, and every process and
-- machine on the ledger shares one organization's allowance. ``organization`` is the name of the
-- Admin API key's variable (admin_key_env), never a key.
CREATE TABLE IF NOT EXISTS provider_poll (
    provider      TEXT NOT NULL,
    organization  TEXT NOT NULL,
    polled_at     TEXT NOT NULL,
    PRIMARY KEY (provider, organization)
);

-- A machine's view of the path to the provider (docs/architecture.md "Failure classes and health"):
-- the health of the host classes (transport) seen from one host, kept per host so one machine's
-- broken network never cools an account for the others. The columns and rules are health's.
CREATE TABLE IF NOT EXISTS host_health (
    provider            TEXT NOT NULL,
    account             TEXT NOT NULL,
    host                TEXT NOT NULL,
    state               TEXT NOT NULL CHECK (state IN ('ok', 'failing')),
    failure_class       TEXT,
    http_status         INTEGER,
    since               TEXT,
    last_failure_at     TEXT,
    last_success_at     TEXT,
    cooldown_until      TEXT,
    probe_attempt_id    TEXT,
    transport_failures  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, account, host),
    FOREIGN KEY (provider, account) REFERENCES account (provider, name)
);

-- Totals per UTC day and per credit period by outcome (docs/architecture.md "Datasette"), so the
-- spend views read a few aggregate rows instead of summing attempts, at any length of history.
-- The triggers below keep them in the statement that inserts or changes an attempt, hence in its
-- transaction, whichever code path writes it. An attempt's provider, account, month and day never
-- change. Both are WITHOUT ROWID (one B-tree each), so keeping them journals one page apiece.
CREATE TABLE IF NOT EXISTS day (
    day_utc       TEXT NOT NULL,
    provider      TEXT NOT NULL,
    account       TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    settled_nusd  INTEGER NOT NULL DEFAULT 0,   -- costs of the day's settled attempts
    open_nusd     INTEGER NOT NULL DEFAULT 0,   -- ceilings of the day's open attempts
    PRIMARY KEY (day_utc, provider, account)
) WITHOUT ROWID;

-- One row per credit period, account, state and recorded outcome (with the documented error
-- type, rejection class and HTTP status): what attempts_by_outcome, rejection_classes and the
-- dashboard's last success read. '' and 0 stand for "none", since a key column cannot be NULL.
CREATE TABLE IF NOT EXISTS month_outcome (
    month_utc            TEXT NOT NULL,
    provider             TEXT NOT NULL,
    account              TEXT NOT NULL,
    state                TEXT NOT NULL,
    outcome              TEXT NOT NULL,
    provider_error_type  TEXT NOT NULL,
    rejection_class      TEXT NOT NULL,
    http_status          INTEGER NOT NULL,
    attempts             INTEGER NOT NULL DEFAULT 0,
    cost_nusd            INTEGER NOT NULL DEFAULT 0,
    open_nusd            INTEGER NOT NULL DEFAULT 0,
    last_at              TEXT NOT NULL,   -- latest admission (open) or settlement (settled) counted
    PRIMARY KEY (month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS attempt_totals_insert AFTER INSERT ON attempt BEGIN
    INSERT INTO day (day_utc, provider, account, attempts, settled_nusd, open_nusd)
    VALUES (NEW.day_utc, NEW.provider, NEW.account, 1, COALESCE(NEW.cost_nusd, 0),
            CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END)
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, settled_nusd = settled_nusd + excluded.settled_nusd,
        open_nusd = open_nusd + excluded.open_nusd;
    INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type, rejection_class,
        http_status, attempts, cost_nusd, open_nusd, last_at)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.state, COALESCE(NEW.outcome, ''),
            COALESCE(NEW.provider_error_type, ''), COALESCE(NEW.rejection_class, ''), COALESCE(NEW.http_status, 0),
            1, COALESCE(NEW.cost_nusd, 0), CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END,
            COALESCE(NEW.settled_at, NEW.created_at))
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, cost_nusd = cost_nusd + excluded.cost_nusd,
        open_nusd = open_nusd + excluded.open_nusd, last_at = max(last_at, excluded.last_at);
END;

CREATE TRIGGER IF NOT EXISTS attempt_totals_update
AFTER UPDATE OF state, outcome, provider_error_type, rejection_class, http_status, cost_nusd, ceiling_nusd ON attempt BEGIN
    UPDATE day SET
        settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0) + COALESCE(NEW.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
            + CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END
    WHERE day_utc = NEW.day_utc AND provider = NEW.provider AND account = NEW.account;
    UPDATE month_outcome SET attempts = attempts - 1, cost_nusd = cost_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account AND state = OLD.state
        AND outcome = COALESCE(OLD.outcome, '') AND provider_error_type = COALESCE(OLD.provider_error_type, '')
        AND rejection_class = COALESCE(OLD.rejection_class, '') AND http_status = COALESCE(OLD.http_status, 0);
    INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type, rejection_class,
        http_status, attempts, cost_nusd, open_nusd, last_at)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.state, COALESCE(NEW.outcome, ''),
            COALESCE(NEW.provider_error_type, ''), COALESCE(NEW.rejection_class, ''), COALESCE(NEW.http_status, 0),
            1, COALESCE(NEW.cost_nusd, 0), CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END,
            COALESCE(NEW.settled_at, NEW.created_at))
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, cost_nusd = cost_nusd + excluded.cost_nusd,
        open_nusd = open_nusd + excluded.open_nusd, last_at = max(last_at, excluded.last_at);
END;

-- Per credit period, account and client label (attempts without a label are not in it): what
-- the dashboard's client table reads. Kept like the totals above; an attempt's client never changes.
CREATE TABLE IF NOT EXISTS month_client (
    month_utc     TEXT NOT NULL,
    provider      TEXT NOT NULL,
    account       TEXT NOT NULL,
    client        TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    settled_nusd  INTEGER NOT NULL DEFAULT 0,   -- costs of settled attempts
    open_nusd     INTEGER NOT NULL DEFAULT 0,   -- ceilings of open attempts
    tokens        INTEGER NOT NULL DEFAULT 0,   -- billed tokens of settled attempts
    open_tokens   INTEGER NOT NULL DEFAULT 0,   -- token ceilings of open attempts
    PRIMARY KEY (month_utc, provider, account, client)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS attempt_client_insert AFTER INSERT ON attempt WHEN NEW.client IS NOT NULL BEGIN
    INSERT INTO month_client (month_utc, provider, account, client, attempts, settled_nusd, open_nusd, tokens, open_tokens)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.client, 1, COALESCE(NEW.cost_nusd, 0),
            CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END,
            CASE WHEN NEW.state = 'settled' THEN COALESCE(NEW.tokens, 0) ELSE 0 END,
            CASE WHEN NEW.state = 'open' THEN COALESCE(NEW.ceiling_tokens, 0) ELSE 0 END)
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, settled_nusd = settled_nusd + excluded.settled_nusd,
        open_nusd = open_nusd + excluded.open_nusd, tokens = tokens + excluded.tokens,
        open_tokens = open_tokens + excluded.open_tokens;
END;

CREATE TRIGGER IF NOT EXISTS attempt_client_update
AFTER UPDATE OF state, cost_nusd, ceiling_nusd, tokens, ceiling_tokens ON attempt WHEN NEW.client IS NOT NULL BEGIN
    UPDATE month_client SET
        settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0) + COALESCE(NEW.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
            + CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END,
        tokens = tokens - CASE WHEN OLD.state = 'settled' THEN COALESCE(OLD.tokens, 0) ELSE 0 END
            + CASE WHEN NEW.state = 'settled' THEN COALESCE(NEW.tokens, 0) ELSE 0 END,
        open_tokens = open_tokens - CASE WHEN OLD.state = 'open' THEN COALESCE(OLD.ceiling_tokens, 0) ELSE 0 END
            + CASE WHEN NEW.state = 'open' THEN COALESCE(NEW.ceiling_tokens, 0) ELSE 0 END
    WHERE month_utc = NEW.month_utc AND provider = NEW.provider AND account = NEW.account AND client = NEW.client;
END;

CREATE TRIGGER IF NOT EXISTS attempt_client_delete AFTER DELETE ON attempt WHEN OLD.client IS NOT NULL BEGIN
    UPDATE month_client SET attempts = attempts - 1, settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END,
        tokens = tokens - CASE WHEN OLD.state = 'settled' THEN COALESCE(OLD.tokens, 0) ELSE 0 END,
        open_tokens = open_tokens - CASE WHEN OLD.state = 'open' THEN COALESCE(OLD.ceiling_tokens, 0) ELSE 0 END
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account AND client = OLD.client;
END;

CREATE TRIGGER IF NOT EXISTS attempt_totals_delete AFTER DELETE ON attempt BEGIN
    UPDATE day SET attempts = attempts - 1, settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
    WHERE day_utc = OLD.day_utc AND provider = OLD.provider AND account = OLD.account;
    UPDATE month_outcome SET attempts = attempts - 1, cost_nusd = cost_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account AND state = OLD.state
        AND outcome = COALESCE(OLD.outcome, '') AND provider_error_type = COALESCE(OLD.provider_error_type, '')
        AND rejection_class = COALESCE(OLD.rejection_class, '') AND http_status = COALESCE(OLD.http_status, 0);
END;

-- Per credit period, account and requested model (issue 23, docs/architecture.md "Spend"): what
-- `llm accounts spend --by model`, the spend_by_model query and the dashboard's model panel read,
-- a few rows per period however long the history. The requested model, not the served one: it is
-- known at reservation and never changes, so a row is keyed once and the triggers stay simple.
CREATE TABLE IF NOT EXISTS month_model (
    month_utc     TEXT NOT NULL,
    provider      TEXT NOT NULL,
    account       TEXT NOT NULL,
    model         TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    settled_nusd  INTEGER NOT NULL DEFAULT 0,   -- costs of settled attempts
    open_nusd     INTEGER NOT NULL DEFAULT 0,   -- ceilings of open attempts
    PRIMARY KEY (month_utc, provider, account, model)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS attempt_model_insert AFTER INSERT ON attempt BEGIN
    INSERT INTO month_model (month_utc, provider, account, model, attempts, settled_nusd, open_nusd)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.requested_model, 1, COALESCE(NEW.cost_nusd, 0),
            CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END)
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, settled_nusd = settled_nusd + excluded.settled_nusd,
        open_nusd = open_nusd + excluded.open_nusd;
END;

CREATE TRIGGER IF NOT EXISTS attempt_model_update AFTER UPDATE OF state, cost_nusd, ceiling_nusd ON attempt BEGIN
    UPDATE month_model SET
        settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0) + COALESCE(NEW.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
            + CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END
    WHERE month_utc = NEW.month_utc AND provider = NEW.provider AND account = NEW.account
        AND model = NEW.requested_model;
END;

CREATE TRIGGER IF NOT EXISTS attempt_model_delete AFTER DELETE ON attempt BEGIN
    UPDATE month_model SET attempts = attempts - 1, settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account
        AND model = OLD.requested_model;
END;

-- Per credit period, account and llm conversation (attempts of conversations only; a one-off
-- prompt has no conversation): what `llm accounts spend --by conversation` and the
-- spend_by_conversation query read. One row per conversation and period, kept like month_model.
CREATE TABLE IF NOT EXISTS month_conversation (
    month_utc     TEXT NOT NULL,
    provider      TEXT NOT NULL,
    account       TEXT NOT NULL,
    conversation  TEXT NOT NULL,   -- the llm conversation id (attempt.scope_id)
    attempts      INTEGER NOT NULL DEFAULT 0,
    settled_nusd  INTEGER NOT NULL DEFAULT 0,   -- costs of settled attempts
    open_nusd     INTEGER NOT NULL DEFAULT 0,   -- ceilings of open attempts
    PRIMARY KEY (month_utc, provider, account, conversation)
) WITHOUT ROWID;

-- The costliest conversations of a period first (docs/performance.md "Spend views at any length
-- of history"): spend_by_conversation and `spend --by conversation` read the first rows of one of
-- these in order and stop at their limit, however many conversations the period holds. The second
-- serves one account's. Each carries the figures shown (covering), so no row is looked up.
CREATE INDEX IF NOT EXISTS month_conversation_top ON month_conversation
    (month_utc DESC, (settled_nusd + open_nusd) DESC, account, conversation, attempts, settled_nusd, open_nusd);
CREATE INDEX IF NOT EXISTS month_conversation_account_top ON month_conversation
    (account, month_utc DESC, (settled_nusd + open_nusd) DESC, conversation, attempts, settled_nusd, open_nusd);

CREATE TRIGGER IF NOT EXISTS attempt_conversation_insert AFTER INSERT ON attempt WHEN NEW.scope_kind = 'conversation' BEGIN
    INSERT INTO month_conversation (month_utc, provider, account, conversation, attempts, settled_nusd, open_nusd)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.scope_id, 1, COALESCE(NEW.cost_nusd, 0),
            CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END)
    ON CONFLICT DO UPDATE SET attempts = attempts + 1, settled_nusd = settled_nusd + excluded.settled_nusd,
        open_nusd = open_nusd + excluded.open_nusd;
END;

CREATE TRIGGER IF NOT EXISTS attempt_conversation_update AFTER UPDATE OF state, cost_nusd, ceiling_nusd ON attempt
WHEN NEW.scope_kind = 'conversation' BEGIN
    UPDATE month_conversation SET
        settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0) + COALESCE(NEW.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
            + CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END
    WHERE month_utc = NEW.month_utc AND provider = NEW.provider AND account = NEW.account
        AND conversation = NEW.scope_id;
END;

CREATE TRIGGER IF NOT EXISTS attempt_conversation_delete AFTER DELETE ON attempt WHEN OLD.scope_kind = 'conversation' BEGIN
    UPDATE month_conversation SET attempts = attempts - 1, settled_nusd = settled_nusd - COALESCE(OLD.cost_nusd, 0),
        open_nusd = open_nusd - CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account
        AND conversation = OLD.scope_id;
END;

-- Per credit period and account, all of its conversations together: how many month_conversation
-- rows have attempts, and their sums. `spend --by conversation` reads it for its total and its
-- "N more" line, so neither counts the period's conversations. Kept by triggers on
-- month_conversation itself (an upsert fires the insert trigger or the update one, never both).
CREATE TABLE IF NOT EXISTS month_conversation_total (
    month_utc      TEXT NOT NULL,
    provider       TEXT NOT NULL,
    account        TEXT NOT NULL,
    conversations  INTEGER NOT NULL DEFAULT 0,   -- month_conversation rows with attempts
    attempts       INTEGER NOT NULL DEFAULT 0,
    settled_nusd   INTEGER NOT NULL DEFAULT 0,
    open_nusd      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (month_utc, provider, account)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS month_conversation_total_insert AFTER INSERT ON month_conversation BEGIN
    INSERT INTO month_conversation_total (month_utc, provider, account, conversations, attempts, settled_nusd, open_nusd)
    VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.attempts > 0, NEW.attempts, NEW.settled_nusd, NEW.open_nusd)
    ON CONFLICT DO UPDATE SET conversations = conversations + excluded.conversations,
        attempts = attempts + excluded.attempts, settled_nusd = settled_nusd + excluded.settled_nusd,
        open_nusd = open_nusd + excluded.open_nusd;
END;

CREATE TRIGGER IF NOT EXISTS month_conversation_total_update AFTER UPDATE ON month_conversation BEGIN
    UPDATE month_conversation_total SET conversations = conversations + (NEW.attempts > 0) - (OLD.attempts > 0),
        attempts = attempts + NEW.attempts - OLD.attempts, settled_nusd = settled_nusd + NEW.settled_nusd - OLD.settled_nusd,
        open_nusd = open_nusd + NEW.open_nusd - OLD.open_nusd
    WHERE month_utc = NEW.month_utc AND provider = NEW.provider AND account = NEW.account;
END;

CREATE TRIGGER IF NOT EXISTS month_conversation_total_delete AFTER DELETE ON month_conversation BEGIN
    UPDATE month_conversation_total SET conversations = conversations - (OLD.attempts > 0),
        attempts = attempts - OLD.attempts, settled_nusd = settled_nusd - OLD.settled_nusd,
        open_nusd = open_nusd - OLD.open_nusd
    WHERE month_utc = OLD.month_utc AND provider = OLD.provider AND account = OLD.account;
END;

-- Warm prefixes at work, per credit period and account (docs/architecture.md "Warm prefixes"): new
-- conversations whose request had a one-hour prefix that bound where it was warm or cold, and
-- what cache reads saved (llm_accounts.cache_savings). The ledger keeps it in the reservation and
-- settlement transactions; a ledger gains it empty, so its counts start with this build.
CREATE TABLE IF NOT EXISTS warm_month (
    month_utc         TEXT NOT NULL,
    provider          TEXT NOT NULL,
    account           TEXT NOT NULL,
    bound_warm        INTEGER NOT NULL DEFAULT 0,
    bound_cold        INTEGER NOT NULL DEFAULT 0,
    cache_saved_nusd  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (month_utc, provider, account)
) WITHOUT ROWID;

-- Version 3: prompts waiting for room that ceilings in flight hold (docs/architecture.md "Waiting
-- for room"), in arrival order (seq, given under the write lock). A waiter renews expires_at while
-- it polls, so one killed while waiting stops counting once it expires; admission deletes its row.
-- No prompt, key or scope is kept: an id, the account it waits for (NULL: any), its model and ceiling.
CREATE TABLE IF NOT EXISTS waiter (
    id            TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE,
    provider      TEXT NOT NULL,
    account       TEXT,
    model         TEXT NOT NULL,
    ceiling_nusd  INTEGER NOT NULL CHECK (ceiling_nusd >= 0),
    created_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL
);
"""

# Columns added to shipped tables after they first shipped: (table, column, declaration).
# An open adds any that are missing (ALTER TABLE ... ADD COLUMN), keeping every row.
COLUMNS = [
    # Running totals of the month's attempts, kept in the transaction that changes an attempt, so
    # admission reads one row instead of summing the month (see ``BACKFILL``). The day totals are
    # for ``day_utc``, the newest UTC day admitted in the month (every UTC day lies in one credit
    # period). Adjustments are not in them: they are summed from ``adjustment``.
    ("month", "settled_nusd", "INTEGER NOT NULL DEFAULT 0"),
    ("month", "open_nusd", "INTEGER NOT NULL DEFAULT 0"),
    ("month", "day_utc", "TEXT"),
    ("month", "day_settled_nusd", "INTEGER NOT NULL DEFAULT 0"),
    ("month", "day_open_nusd", "INTEGER NOT NULL DEFAULT 0"),
    # A run of transport failures still below the three that start a dwell (llm_accounts.health).
    ("health", "transport_failures", "INTEGER NOT NULL DEFAULT 0"),
    # Client token caps (docs/architecture.md "Client caps"): the attempt's worst case in billed
    # tokens, reserved like its dollar ceiling (NULL when its quote carried none), and the tokens
    # its settlement billed (input, cache writes, cache reads, output; NULL while open). A client's
    # tokens are summed on the partial attempt_client index, in the admission transaction.
    ("attempt", "ceiling_tokens", "INTEGER CHECK (ceiling_tokens IS NULL OR ceiling_tokens >= 0)"),
    ("attempt", "tokens", "INTEGER CHECK (tokens IS NULL OR tokens >= 0)"),
    # Whether a new conversation bound where its one-hour prefix was warm (1) or cold (0); NULL
    # when its request had no one-hour prefix, it was pinned, or it predates this column
    # (docs/architecture.md "Warm prefixes").
    ("binding", "warm", "INTEGER CHECK (warm IS NULL OR warm IN (0, 1))"),
    # The machine that admitted the attempt (``host_health``; NULL before this column): a
    # transport failure is recorded for it, and its in-flight probe holds that host's slot.
    ("attempt", "host", "TEXT"),
    # The process that reserved the attempt (llm_accounts.liveness; NULL before these columns or
    # where /proc cannot be read): while it runs, an attempt without an outcome is in flight; once
    # it is gone, a process on the same host records the outcome as cancelled.
    ("attempt", "pid", "INTEGER"),
    ("attempt", "pid_started", "TEXT"),
    # When the attempt's outcome was first recorded (NULL while in flight, and before this
    # column): the end of the span a usage report is read over (docs/architecture.md "Settling
    # from the provider"), and the instant the legacy report's finality counts from.
    ("attempt", "outcome_at", "TEXT"),
    # The quote's bounds a report's remainder must fit before it may settle the attempt: the most
    # output tokens (max_tokens, times the server-tool samplings) and the most web searches
    # (NULL before these columns: such an attempt is never settled from a report).
    ("attempt", "max_output", "INTEGER"),
    ("attempt", "max_web_searches", "INTEGER"),
    # A hold shrunk once message_start counted the input (docs/pricing.md "Shrinking a hold on
    # message_start"): the counts it rests on (numeric JSON), when, and the ceiling reserved
    # before it (ceiling_nusd is then the hold). NULL for an attempt never shrunk.
    ("attempt", "counted_json", "TEXT"),
    ("attempt", "counted_at", "TEXT"),
    ("attempt", "reserved_nusd", "INTEGER"),
    # A waiter's client label and token ceiling: a waiter its own client's caps keep out of an
    # account is owed no room there (docs/architecture.md "Waiting for room"). NULL on a place
    # queued before these columns, which counts as before.
    ("waiter", "client", "TEXT"),
    ("waiter", "ceiling_tokens", "INTEGER CHECK (ceiling_tokens IS NULL OR ceiling_tokens >= 0)"),
]

# Indexes over columns that ``COLUMNS`` adds: created after them on every open that migrates.
INDEXES = """
-- A budget refusal's open counts (llm_accounts.ledger.admission._open_counts): one credit period's
-- open attempts of the refused accounts, with what the counts need (covering, state included, so no attempt row is
-- read). Keyed by credit period, since attempts left open with an unknown outcome pile up in every
-- period until reconciled (docs/performance.md "Spend views at any length of history").
CREATE INDEX IF NOT EXISTS attempt_open_period ON attempt
    (provider, month_utc, account, day_utc, client, outcome, ceiling_nusd, ceiling_tokens, state) WHERE state = 'open';
"""

# Run once when any of the month totals is added to an older ledger: recompute them from its rows.
BACKFILL = {
    "month": """
UPDATE month SET
    settled_nusd = (SELECT COALESCE(SUM(a.cost_nusd), 0) FROM attempt a
        WHERE a.provider = month.provider AND a.account = month.name
        AND a.month_utc = month.month_utc AND a.state = 'settled'),
    open_nusd = (SELECT COALESCE(SUM(a.ceiling_nusd), 0) FROM attempt a
        WHERE a.provider = month.provider AND a.account = month.name
        AND a.month_utc = month.month_utc AND a.state = 'open'),
    day_utc = (SELECT MAX(a.day_utc) FROM attempt a
        WHERE a.provider = month.provider AND a.account = month.name AND a.month_utc = month.month_utc);
UPDATE month SET
    day_settled_nusd = (SELECT COALESCE(SUM(a.cost_nusd), 0) FROM attempt a
        WHERE a.provider = month.provider AND a.account = month.name
        AND a.day_utc = month.day_utc AND a.state = 'settled'),
    day_open_nusd = (SELECT COALESCE(SUM(a.ceiling_nusd), 0) FROM attempt a
        WHERE a.provider = month.provider AND a.account = month.name
        AND a.day_utc = month.day_utc AND a.state = 'open')
""",
    # Run when the token columns reach an older ledger: settled attempts get the tokens their
    # stored usage billed (a refusal or a never-sent attempt billed none); a reconciled one stays
    # unknown. Attempts still open carry no token ceiling: nothing recorded what their window was.
    "attempt": """
UPDATE attempt SET tokens = CASE WHEN outcome = 'complete' AND json_valid(usage_json) THEN
        COALESCE(json_extract(usage_json, '$.input_tokens'), 0)
        + COALESCE(json_extract(usage_json, '$.cache_creation_input_tokens'), 0)
        + COALESCE(json_extract(usage_json, '$.cache_read_input_tokens'), 0)
        + COALESCE(json_extract(usage_json, '$.output_tokens'), 0)
    WHEN outcome IN ('not_sent', 'rate_limited', 'overloaded', 'auth_required', 'request_rejected') THEN 0 END
WHERE state = 'settled' AND tokens IS NULL
""",
    # The day and month_outcome totals (issue 14), computed from the rows when an open creates
    # those tables; from then on the attempt triggers keep them. One pass over the attempts each.
    "day": """
DELETE FROM day;
INSERT INTO day (day_utc, provider, account, attempts, settled_nusd, open_nusd)
SELECT day_utc, provider, account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt GROUP BY day_utc, provider, account
""",
    "month_outcome": """
DELETE FROM month_outcome;
INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type, rejection_class,
    http_status, attempts, cost_nusd, open_nusd, last_at)
SELECT month_utc, provider, account, state, COALESCE(outcome, ''), COALESCE(provider_error_type, ''),
       COALESCE(rejection_class, ''), COALESCE(http_status, 0), COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0), MAX(COALESCE(settled_at, created_at))
FROM attempt
GROUP BY month_utc, provider, account, state, COALESCE(outcome, ''), COALESCE(provider_error_type, ''),
         COALESCE(rejection_class, ''), COALESCE(http_status, 0)
""",
    "month_client": """
DELETE FROM month_client;
INSERT INTO month_client (month_utc, provider, account, client, attempts, settled_nusd, open_nusd, tokens, open_tokens)
SELECT month_utc, provider, account, client, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0),
       COALESCE(SUM(CASE WHEN state = 'settled' THEN tokens END), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_tokens END), 0)
FROM attempt WHERE client IS NOT NULL GROUP BY month_utc, provider, account, client
""",
    "month_model": """
DELETE FROM month_model;
INSERT INTO month_model (month_utc, provider, account, model, attempts, settled_nusd, open_nusd)
SELECT month_utc, provider, account, requested_model, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt GROUP BY month_utc, provider, account, requested_model
""",
    "month_conversation": """
DELETE FROM month_conversation;
INSERT INTO month_conversation (month_utc, provider, account, conversation, attempts, settled_nusd, open_nusd)
SELECT month_utc, provider, account, scope_id, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE scope_kind = 'conversation' GROUP BY month_utc, provider, account, scope_id
""",
    # Filled from month_conversation when an open creates it (in either order with month_conversation's
    # own backfill: that one's inserts reach this table through its triggers).
    "month_conversation_total": """
DELETE FROM month_conversation_total;
INSERT INTO month_conversation_total (month_utc, provider, account, conversations, attempts, settled_nusd, open_nusd)
SELECT month_utc, provider, account, SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), SUM(attempts), SUM(settled_nusd),
       SUM(open_nusd)
FROM month_conversation GROUP BY month_utc, provider, account
""",
}

TABLE_NAMES = ("account", "month", "binding", "attempt", "adjustment", "warm_prefix", "health", "model_health",
               "day", "month_outcome", "month_client",  # issue 14's totals, gained on open
               "month_model", "month_conversation",  # issue 23, gained on open
               "month_conversation_total",  # issue 23 (conversations at scale), gained on open
               "warm_month",  # warm_month: issue 13, gained on open
               "host_health",  # per-host transport health (issue 25), gained on open
               "budget_warning",  # thresholds warned of (issue 23), gained on open
               "waiter",  # version 3
               "provider_poll")  # the provider pass's poll claims (issue 31), gained on open

# A version-1 or version-2 file must already hold these; the others are gained on open.
BASE_TABLES = ("account", "month", "binding", "attempt", "adjustment")


def statements(script=TABLES):
    """Split a script into single statements (``executescript`` would commit the open transaction)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip():
        yield pending.strip()
