"""``llm_accounts.money``: the name docs/python.md gives notebooks for showing nanodollars as
dollars. The module is ``pricing/money.py`` (docs/architecture.md "The house"); this one only
keeps the documented import working.
"""

from .pricing.money import INT64_MAX, NANO, parse_usd, usd, usd_exact, usd_fine  # noqa: F401
