"""What one routed prompt cost, and which account paid (docs/architecture.md "The cost of a prompt").

Read from the routing record llm logs as ``response_json["routing"]``: each attempt's settled
``cost_nusd``, or ``None`` while its outcome is unknown. An unknown attempt is *held* at its
ceiling (or the smaller hold ``held_nusd`` its counted input left), never counted as spent (docs/pricing.md "What keeps an attempt open").
"""

import inspect
from dataclasses import dataclass

from ..money import usd_fine


@dataclass(frozen=True)
class Cost:
    """Integer nanodollars: ``spent_nusd`` settled, ``held_nusd`` still reserved (unknown)."""

    account: str | None
    spent_nusd: int
    held_nusd: int


def cost_from_routing(routing):
    """The ``Cost`` of a routing record, or None when there is none (an unrouted prompt)."""
    if not isinstance(routing, dict) or not isinstance(routing.get("attempts"), list):
        return None
    spent = held = 0
    for record in routing["attempts"]:
        if record.get("cost_nusd") is not None:
            spent += record["cost_nusd"]
        else:
            # Shrunk once message_start counted the input (docs/pricing.md "Shrinking a hold on
            # message_start"), else the whole ceiling.
            held += record.get("held_nusd", record.get("ceiling_nusd")) or 0
    return Cost(routing.get("account"), spent, held)


def cost_of(response):
    """The ``Cost`` of a routed llm response (sync or async, live or from ``llm logs``), or None.

    A sync response llm has not run yet (``model.prompt()`` is lazy) is run first, as llm's own
    ``response.usage()`` does; an async one must have been awaited (``await response.text()``).

    >>> cost = cost_of(model.prompt("Hi"))       # doctest: +SKIP
    >>> cost.account, cost.spent_nusd, cost.held_nusd
    """
    force = getattr(response, "_force", None)
    if not getattr(response, "_done", True) and callable(force) and not inspect.iscoroutinefunction(force):
        force()
    record = getattr(response, "response_json", None) or {}
    return cost_from_routing(record.get("routing"))


def usage_details(cost):
    """The entries llm's own usage line shows (``llm -u``, ``llm logs -u``, ``llm logs --json``):
    dollars formatted like every other spend figure, and ``held`` only when something is open."""
    if cost is None:
        return {}
    details = {"cost": usd_fine(cost.spent_nusd), "paid_by": cost.account}
    if cost.held_nusd:
        details["held"] = usd_fine(cost.held_nusd)
    return {name: value for name, value in details.items() if value is not None}
