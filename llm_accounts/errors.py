"""The routed error codes (docs/errors.md "Error codes").

Every refusal the plugin raises is an ``AccountsError`` carrying one code from a closed set.
Messages name codes, accounts, fields and rules, never a key or a provider's text.
"""

CODES = frozenset(
    {
        "credential_missing",
        "credential_invalid",
        "credential_lookup_failed",
        "credential_conflict",
        "unsupported_pricing",
        "budget_exhausted",
        "account_blocked",
        "account_config_conflict",
        "ledger_busy",
        "ledger_unavailable",
        "duplicate_attempt",
        "settlement_conflict",
        "ceiling_exceeded",
        "auth_failed",
        "rate_limited",
        "request_rejected",
        "provider_error",
        "transport_error",
        # A declaration (ANTHROPIC_ACCOUNTS, .env, accounts.json) or a command's input is invalid.
        "declaration_invalid",
        # No account can take a new conversation (all cooling, blocked or not serving the model).
        "no_account_available",
        # A command named something the ledger or the declaration does not hold: an account,
        # an attempt id (or a prefix matching none), a conversation.
        "not_found",
    }
)


class AccountsError(Exception):
    """A refusal with a code from ``CODES``; ``str()`` is one line, safe to print."""

    def __init__(self, code, message, *, account=None, attempt_id=None, http_status=None, retry_at=None, held=()):
        if code not in CODES:
            raise ValueError("unknown error code")
        self.code = code
        self.account = account
        self.attempt_id = attempt_id
        self.http_status = http_status
        # When a cooling account takes its next attempt (an aware datetime), for a refusal a
        # caller may wait out (docs/architecture.md "Retries").
        self.retry_at = retry_at
        # A budget refusal only ceilings in flight stand in the way of: per account, the room they
        # hold (``selection.Held``), for a caller that may wait for it (docs/architecture.md
        # "Waiting for room"). Empty for every other refusal.
        self.held = tuple(held)
        self.message = message
        super().__init__(f"{code}: {message}")

    def __repr__(self):
        return f"AccountsError({self.code!r}, account={self.account!r})"
