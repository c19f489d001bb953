"""Prices and money: what a request may cost before it is sent, and what it cost after
(docs/pricing.md).

- ``prices``: a price revision (the shipped ``llm_accounts/prices/<revision>.json`` files and the
  strict reader every revision passes), the worst-case ceiling of a request (``quote``), the
  settlement cost of a usage (``settlement_cost``) and the hold a counted input shrinks to
  (``counted_hold``);
- ``user_prices``: the user's own price revisions, their files and the checks against the
  shipped table (``llm accounts prices add``/``remove``);
- ``price_book``: which revision prices each model, shipped or the user's, and a revision by id;
- ``tool_bounds``: server tools (web search, web fetch) priced by their documented bounds;
- ``cost``: what one routed prompt cost and which account paid (``llm_accounts.cost_of``);
- ``cache_savings``: what the prompt cache saved on one complete attempt;
- ``fits``: limits too small for the default model's ceiling, said when an account is declared.

Money is integer nanodollars (1 USD = 10**9), never floats (docs/pricing.md "Money"); parsing and
showing it is ``llm_accounts.money``, beside this package, since the ledger, the declarations and
notebooks (docs/python.md) use it too. Nothing here reads the ledger or sends a request: the ledger
and the routed call ask these modules.
"""
