"""The routed error codes (ADR-0126 D6, see design.md "Error codes").

Every refusal the plugin raises is an ``AccountsError`` carrying one code from a closed set.
Messages name codes, accounts, fields and rules, never a key or a provider's text.
"""

CODES = frozenset(
    {
        # ADR-0126 D6
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
        # Ours: a declaration (ANTHROPIC_ACCOUNTS, .env, accounts.json) or a command's input is invalid.
        "declaration_invalid",
        # Ours: no account can take a new conversation (all cooling, blocked or not serving the model).
        "no_account_available",
    }
)


class AccountsError(Exception):
    """A refusal with a code from ``CODES``; ``str()`` is one line, safe to print."""

    def __init__(self, code, message, *, account=None, attempt_id=None, http_status=None):
        if code not in CODES:
            raise ValueError("unknown error code")
        self.code = code
        self.account = account
        self.attempt_id = attempt_id
        self.http_status = http_status
        self.message = message
        super().__init__(f"{code}: {message}")

    def __repr__(self):
        return f"AccountsError({self.code!r}, account={self.account!r})"
