"""What the prompt cache saved on one complete attempt (docs/architecture.md "Warm prefixes").

The saving is the attempt's cache reads priced at the base input rate minus what they cost: the
read rate, both at the tier the request's total input was billed at (docs/pricing.md "Settlement
cost"). Cache writes cost more than base input; that premium is the price of the saving and is
already in the attempt's cost, so it is not netted here. Integer nanodollars, rounded down.
"""

import math

from . import price_book
from ..errors import AccountsError
from ..records import tokens


def _revision(revision_id):
    # Not cached here: a shipped revision is cached by pricing, and a user's is read again when
    # its file changes (user_prices), so a corrected or removed one is never priced from a copy.
    try:
        return price_book.load_revision(revision_id)
    except (AccountsError, ValueError, OSError):
        return None


def saved_nusd(usage, served_model, revision_id):
    """Nanodollars the cache reads in ``usage`` saved against base input; 0 when the model or the
    revision is not shipped (the saving is a report, never a charge)."""
    read = tokens(usage, "cache_read_input_tokens")
    if read <= 0:
        return 0
    revision = _revision(revision_id)
    price = None if revision is None else revision.model(served_model)
    if price is None:
        return 0
    total = read + tokens(usage, "input_tokens") + tokens(usage, "cache_creation_input_tokens")
    rates = price.rates_for(total)
    return max(0, math.floor(read * (rates.input - rates.cache_read)))
