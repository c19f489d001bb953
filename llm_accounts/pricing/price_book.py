"""Which revision prices each model: the shipped one, or a price revision of the user's own
(docs/pricing.md "Your own price revisions" and "Which price wins").

Pure: ``build`` takes revisions already read and decides; ``current`` reads them
(``user_prices``) and builds. The rule:

- a model the shipped revision does not know is priced by the user revision that lists it (of
  two, the later ``applies_from``, then the later id);
- a model the shipped revision knows (by id or alias) keeps the shipped price, unless the user
  revision says ``"overrides_shipped": true`` *and* applies from a later date than the shipped
  revision's: then the user's price replaces the shipped model, every name of it.

A ``Book`` answers ``model(name)`` like a ``Revision``, so model lists, aliases and account
model lists resolve through it; each price still belongs to one revision (``revision_of``), the
one that quotes it and that the attempt records.
"""

import dataclasses
import json
from dataclasses import dataclass

from . import prices


@dataclass(frozen=True)
class Entry:
    """A model of one revision, and whether its price is the one in force."""

    price: prices.ModelPrice
    revision: prices.Revision
    in_force: bool
    note: str = ""  # why not in force, or what it replaces
    # Names of the models it replaced that its own price does not list: they resolve to it too
    # (docs/pricing.md "Which price wins", rule 3).
    taken: tuple = ()

    @property
    def names(self):
        return (self.price.id, *self.price.aliases, *self.taken)


class Book:
    def __init__(self, shipped, entries, problems=()):
        self.shipped = shipped
        self.entries = tuple(entries)
        # (file name or None, AccountsError) for each user price file that was not read.
        self.problems = tuple(problems)
        self._names, self.models = {}, {}
        for entry in self.entries:
            if entry.in_force:
                # A price that took over a shipped model's names lists them as its aliases, so
                # the routed model is registered under them as well.
                price = entry.price if not entry.taken else dataclasses.replace(
                    entry.price, aliases=tuple(dict.fromkeys((*entry.price.aliases, *entry.taken)))
                )
                self.models[entry.price.id] = price
                for name in entry.names:
                    self._names[name] = entry

    def model(self, name):
        """The price in force for an exact model id or alias, from whichever revision."""
        entry = self._names.get(name) if isinstance(name, str) else None
        return None if entry is None else self.models[entry.price.id]

    def revision_of(self, name):
        """The revision whose price is in force for ``name``; the shipped one for a model no
        revision prices (so a quote refuses it under the shipped revision's id)."""
        entry = self._names.get(name) if isinstance(name, str) else None
        return self.shipped if entry is None else entry.revision

    def unpriced(self, model_ids):
        """The ids no revision prices, in order (``refresh-models`` lists them)."""
        return [model_id for model_id in dict.fromkeys(model_ids) if self.model(model_id) is None]

    def revision_for_body(self, body):
        """The revision that prices the frozen request ``body``'s model."""
        try:
            request = json.loads(body)
        except (TypeError, ValueError, RecursionError):
            return self.shipped
        return self.revision_of(request.get("model") if isinstance(request, dict) else None)


def build(shipped, user_revisions, problems=(), today=None):
    """The ``Book`` of ``shipped`` and the user's revisions, by the rule above.

    ``today`` (a ``YYYY-MM-DD`` UTC date; None: no date is checked) keeps a shipped price in
    force until the user revision replacing it applies: a price cut announced for next month
    must not settle this month's attempts below what the provider bills for them."""
    entries = [Entry(price, shipped, True) for price in shipped.models.values()]
    ordered = sorted(user_revisions, key=lambda revision: (revision.applies_from, revision.id))
    for revision in ordered:
        for price in revision.models.values():
            names = {price.id, *price.aliases}
            holders = [i for i, e in enumerate(entries) if e.in_force and names & set(e.names)]
            shipped_holders = [i for i in holders if entries[i].revision is shipped]
            if shipped_holders and today is not None and revision.applies_from > today:
                why = f"the shipped revision {shipped.id} prices it until this revision applies from {revision.applies_from}"
                entries.append(Entry(price, revision, False, why))
                continue
            if shipped_holders and not (revision.overrides_shipped and revision.applies_from > shipped.applies_from):
                why = (
                    f"the shipped revision {shipped.id} prices it"
                    + ("" if revision.overrides_shipped else "; this revision does not set overrides_shipped")
                    + (
                        f"; this revision does not apply from a date after {shipped.applies_from}"
                        if revision.applies_from <= shipped.applies_from
                        else ""
                    )
                )
                entries.append(Entry(price, revision, False, why))
                continue
            replaced, taken = [], {}
            for i in holders:
                old = entries[i]
                entries[i] = Entry(old.price, old.revision, False, f"replaced by {revision.id}")
                replaced.append(f"{old.revision.id}'s {old.price.id}")
                taken.update((name, None) for name in old.names if name not in names)
            entries.append(Entry(price, revision, True, f"replaces {', '.join(replaced)}" if replaced else "", tuple(taken)))
    return Book(shipped, entries, problems)


def current():
    """The book in force now: the newest shipped revision and the user's price files."""
    from .. import clock
    from .user_prices import load_user_revisions

    revisions, problems = load_user_revisions()
    return build(prices.current_revision(), revisions, problems, today=clock.utc_day(clock.now()))


def load_revision(revision_id):
    """A revision by id, kept so an attempt quoted under it can still be settled (docs/pricing.md
    "The price revision"): a shipped one, or ``user:<revision>`` from the user's price files."""
    if isinstance(revision_id, str) and revision_id.startswith(prices.USER_PREFIX):
        from .user_prices import load_user_revision  # as in current(): reads the llm user dir

        return load_user_revision(revision_id)
    return prices.load_revision(revision_id)
