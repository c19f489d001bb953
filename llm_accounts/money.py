"""Money is integer nanodollars (1 USD = 10**9), never floats (docs/pricing.md "Money")."""

import re

from .errors import AccountsError

NANO = 10**9
INT64_MAX = 2**63 - 1

_USD = re.compile(r"(?P<whole>[0-9]+)(?:\.(?P<frac>[0-9]{1,9}))?")


def parse_usd(text, field):
    """Parse a decimal USD string such as ``"12.50"`` into positive nanodollars.

    ``field`` names the field path for the error; the value itself is never repeated, since a
    pasted key can land in any field.
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise AccountsError(
            "declaration_invalid",
            f"{field}: must be a decimal string of US dollars, such as \"25.00\" (JSON numbers and booleans are refused)",
        )
    match = _USD.fullmatch(text)
    if match is None:
        raise AccountsError(
            "declaration_invalid",
            f"{field}: must be a positive decimal number of US dollars with at most 9 fractional digits, such as \"25.00\"",
        )
    frac = (match.group("frac") or "").ljust(9, "0")
    nusd = int(match.group("whole")) * NANO + int(frac)
    if nusd <= 0:
        raise AccountsError("declaration_invalid", f"{field}: must be greater than zero")
    if nusd > INT64_MAX:
        raise AccountsError(
            "declaration_invalid", f"{field}: too large (must fit in signed 64-bit nanodollars)"
        )
    return nusd


def usd(nusd, places=2):
    """Format nanodollars as ``$12.34`` (rounded half up to ``places``) for people."""
    if nusd is None:
        return "-"
    sign = "-" if nusd < 0 else ""
    nusd = abs(nusd)
    step = 10 ** (9 - places)
    rounded = (nusd + step // 2) // step
    whole, frac = divmod(rounded, 10**places)
    return f"{sign}${whole:,}" + (f".{frac:0{places}d}" if places else "")


def usd_fine(nusd):
    """``$12.34`` when exact to the cent, else up to six decimals (``$0.000021``), for spend
    figures where a few tokens' cost must not read as zero."""
    if nusd is None:
        return "-"
    if nusd % (NANO // 100) == 0:
        return usd(nusd)
    text = usd(nusd, 6)
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"


def usd_exact(nusd):
    """Format nanodollars as an exact decimal string ``"12.345000001"`` (machine output)."""
    if nusd is None:
        return None
    sign = "-" if nusd < 0 else ""
    whole, frac = divmod(abs(nusd), NANO)
    return f"{sign}{whole}.{frac:09d}"
