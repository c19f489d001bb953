"""Which account a new conversation goes to: pure ordering of candidates (ADR-0126 D3, Amendment 5).

The ledger builds one ``Candidate`` per account that may take the attempt (declared, unblocked,
not cooling, serves the model, has room) inside its reservation transaction and binds the first
of ``order(...)``. Order, first key first:

1. ``rank`` ascending: the owner's ladder (ADR-0029 section 2, ADR-0055 tiers);
2. warm first: the account holds an unexpired ``warm_prefix`` row for the request's stable-prefix
   certificate and stays within the 90% bound with this attempt (Amendment 5, Decision 5);
3. committed utilization ``(settled + adjustments + open ceilings) / (budget * weight)``
   ascending, compared by integer cross-multiplication, never floats ("furthest behind pace");
4. distinct conversations with open attempts ascending;
5. account name.
"""

import dataclasses
import datetime as dt
import functools


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    budget_nusd: int
    committed_nusd: int
    rank: int = 0
    weight: int = 1
    open_scopes: int = 0
    warm: bool = False


def _sign(x):
    return (x > 0) - (x < 0)


def compare_utilization(a, b):
    """-1, 0 or 1 as ``a`` is less, equally or more committed than ``b`` relative to budget x weight."""
    return _sign(a.committed_nusd * b.budget_nusd * b.weight - b.committed_nusd * a.budget_nusd * a.weight)


def compare(a, b):
    return (
        _sign(a.rank - b.rank)
        or _sign(int(b.warm) - int(a.warm))
        or compare_utilization(a, b)
        or _sign(a.open_scopes - b.open_scopes)
        or _sign((a.name > b.name) - (a.name < b.name))
    )


def tied_before_scopes(a, b):
    """Whether rank, warmth and utilization leave ``a`` and ``b`` level (the scope count decides)."""
    return a.rank == b.rank and a.warm == b.warm and compare_utilization(a, b) == 0


def order(candidates):
    """Candidates, the one a new conversation binds first."""
    return sorted(candidates, key=functools.cmp_to_key(compare))


def fits(spent_nusd, open_nusd, ceiling_nusd, budget_nusd):
    """Admission inequality ``S + R + C <= B`` (ADR-0126 D5; equality admits)."""
    return spent_nusd + open_nusd + ceiling_nusd <= budget_nusd


def within_warm_bound(spent_nusd, open_nusd, ceiling_nusd, budget_nusd):
    """Amendment 5 Decision 5: warm only while ``10 * (S + R + C) <= 9 * B`` (equality is inside)."""
    return 10 * (spent_nusd + open_nusd + ceiling_nusd) <= 9 * budget_nusd


def serves(account, model):
    """An account serves every priced model unless its declaration lists ``models``."""
    models = getattr(account, "models", None)
    return models is None or model in models


def parse_time(value):
    """A stored time as an aware datetime, or ``None`` when it is not text, does not parse or has
    no offset (Amendment 5: such a ``warm_prefix`` row counts as absent, nothing refuses)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return None
    return parsed
