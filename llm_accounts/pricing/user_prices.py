"""The user's own price revisions: ``<llm user dir>/llm-accounts/prices/<revision>.json``
(docs/pricing.md "Your own price revisions").

``llm accounts prices add FILE`` validates a file as strictly as the shipped revision
(``prices.parse_price_file``), holds it to what the shipped table says of the same models
(``check_against_shipped``), checks that no string in it holds a run of a declared key, and
copies it here whole or not at all; a file put here by hand is read the same way. A file that
breaks a rule is not used, and each command that reads prices says so in one coded line; the
others still are. Each revision's id is ``user:<revision>``, recorded on every attempt it
prices, so the attempt can still be settled later from this file.
"""

import json
import os
import pathlib
import re
import sys

from . import prices
from ..errors import AccountsError
from ..paths import FileProblem, read_limited, user_dir, write_private_bytes

SUBDIR = ("llm-accounts", "prices")
SUFFIX = ".json"
_SHOWN_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}\.json")

# What each file was read as, by (name, size, mtime, inode): files are read again only when they
# change, so a prompt reading the prices costs a directory listing.
_read = {}
_warned = set()


def prices_dir():
    return user_dir().joinpath(*SUBDIR)


def shown_name(name):
    """A file name as it may be printed: one shaped like a revision id, else a description (a
    name is the user's text and could hold anything)."""
    if _SHOWN_NAME.fullmatch(name) and not prices.looks_like_key(name):
        return name
    return "a file whose name is not <revision>.json"


def _problem(name, error):
    return AccountsError("declaration_invalid", f"price file {shown_name(name)} in {prices_dir()}: {error}")


def _read_file(path, origin=prices.USER):
    """``(Revision, None)`` or ``(None, reason)`` for one file."""
    try:
        raw = read_limited(path)  # docs/security.md "Files read"
    except FileNotFoundError:
        return None, "does not exist"
    except FileProblem as error:
        return None, error.reason
    try:
        revision = prices.parse_price_file(raw, origin)
        check_against_shipped(revision, prices.current_revision())
    except ValueError as error:  # PriceFileError, or a field reader's own ValueError: both name paths
        return None, str(error)
    return revision, None


def check_against_shipped(revision, shipped):
    """What a user revision may not do beyond the file format (docs/pricing.md "Your own price
    revisions"), raised as ``PriceFileError`` naming the field and the rule, never the file's text:

    - a model name that differs from a shipped model's id or alias, or from another name of the
      file, only by case: model names are matched ignoring case, so ``Claude-Haiku-4-5`` would
      otherwise be a second, separately priced model;
    - a ``context_window`` or ``max_output`` below the shipped table's for the same model: a
      ceiling prices the whole window ("Ceiling"), so a smaller window would admit a prompt its
      ceiling does not cover;
    - a rate of zero, unless the model says ``"free": true``: a zero rate settles real usage at
      nothing, so it must be meant.
    """
    shipped_names = {}
    for price in shipped.models.values():
        for name in (price.id, *price.aliases):
            shipped_names[name.lower()] = (name, price)
    own = {}
    for index, price in enumerate(revision.models.values()):
        where = f"models[{index}]"
        named = [(f"{where}.id", price.id)] + [
            (f"{where}.aliases[{position}]", alias) for position, alias in enumerate(price.aliases)
        ]
        replaced = {}
        for field, name in named:
            folded = name.lower()
            if folded in own:
                raise prices.PriceFileError(
                    f"{field}: differs only by case from {own[folded]}'s name; model names are matched ignoring case"
                )
            own[folded] = where
            if folded in shipped_names:
                exact, shipped_price = shipped_names[folded]
                if exact != name:
                    raise prices.PriceFileError(
                        f"{field}: differs only by case from the shipped model name {exact}; model names are matched "
                        "against the shipped ones ignoring case, so use its exact spelling"
                    )
                replaced[shipped_price.id] = shipped_price
        for shipped_price in replaced.values():
            for size, what in (("context_window", "context window"), ("max_output", "maximum output")):
                if getattr(price, size) < getattr(shipped_price, size):
                    raise prices.PriceFileError(
                        f"{where}.{size}: must be at least the shipped revision's {what} for {shipped_price.id} "
                        f"({getattr(shipped_price, size):,} tokens); a ceiling prices the whole window and max_tokens "
                        "up to the maximum output, so a smaller figure would not bound what the model accepts"
                    )
        if not price.free:
            tiers = [("rates", price.rates)]
            if price.long_context is not None:
                tiers.append(("long_context.rates", price.long_context[1]))
            for tier, rates in tiers:
                for name in prices.RATE_NAMES:
                    if getattr(rates, name) == 0:
                        raise prices.PriceFileError(
                            f'{where}.{tier}.{name}: must not be zero unless the model says "free": true '
                            "(it prices a free model on purpose)"
                        )


def shipped_replacements(revision, shipped):
    """One line per shipped price ``revision`` replaces (price_book's rule: it says
    ``overrides_shipped`` and applies after the shipped revision), with the rates old -> new in
    US dollars per million tokens; ``prices add`` prints them on stderr."""
    if not (revision.overrides_shipped and revision.applies_from > shipped.applies_from):
        return []
    lines = []
    for price in revision.models.values():
        olds = {}
        for name in (price.id, *price.aliases):
            old = shipped.model(name)
            if old is not None:
                olds[old.id] = old
        for old in olds.values():
            changes = [
                f"{name} {prices.per_mtok(getattr(old.rates, name))} -> {prices.per_mtok(getattr(price.rates, name))}"
                for name in prices.RATE_NAMES
            ]
            line = (
                f"{revision.id} replaces the shipped price of {old.id} ({shipped.id}) from {revision.applies_from}, "
                f"USD per million tokens: {', '.join(changes)}"
            )
            if old.long_context != price.long_context:
                line += "; long-context tier " + (
                    "dropped" if price.long_context is None
                    else f"above {price.long_context[0]:,} input tokens: "
                    + ", ".join(f"{name} {prices.per_mtok(getattr(price.long_context[1], name))}" for name in prices.RATE_NAMES)
                )
            lines.append(line)
    return lines


def load_user_revisions(directory=None):
    """``(revisions, problems)``: every revision in the directory that passes, and an
    ``AccountsError`` per file that does not (it is skipped; a warning says so once)."""
    directory = pathlib.Path(directory or prices_dir())
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.name.endswith(SUFFIX))
    except FileNotFoundError:
        return [], []
    except OSError:
        return [], [AccountsError("declaration_invalid", f"{directory}: the price directory could not be read")]
    revisions, problems = [], []
    for name in names:
        if name.startswith("."):
            continue  # a copy being written (add writes a temporary file, then renames it)
        path = directory / name
        try:
            info = path.stat()
            signature = (str(path), info.st_size, info.st_mtime_ns, info.st_ino)
        except OSError:
            signature = None
        if signature is not None and signature in _read:
            revision, reason = _read[signature]
        else:
            revision, reason = _read_file(path)
            if reason is None and revision.id != prices.USER_PREFIX + name[: -len(SUFFIX)]:
                revision, reason = None, "its name must be its revision id followed by .json"
            if signature is not None:
                _read[signature] = (revision, reason)
        if reason is not None:
            problem = _problem(name, reason)
            problems.append(problem)
            if signature not in _warned:
                _warned.add(signature)
                print(f"Warning: {problem} (the file is not used)", file=sys.stderr)
            continue
        revisions.append(revision)
    return revisions, problems


def load_user_revision(revision_id):
    """The user revision ``user:<revision>``, to settle an attempt it priced."""
    name = revision_id[len(prices.USER_PREFIX):]
    if not prices.REVISION_ID.fullmatch(name):
        raise AccountsError("unsupported_pricing", "price revision id is not a valid revision id")
    for revision in load_user_revisions()[0]:
        if revision.id == revision_id:
            return revision
    raise AccountsError(
        "unsupported_pricing",
        f"price revision {revision_id} is not among the price files in {prices_dir()} "
        "(llm accounts prices add puts it back)",
    )


def read_candidate(path, holds=None):
    """Validate the file at ``path`` for ``add``: a ``Revision``, or ``AccountsError``
    declaration_invalid naming the field and the rule. ``holds`` tests a string for a run of a
    declared key (``scrub.run_detector``); such a file is refused without saying where."""
    revision, reason = _read_file(path)
    if reason is not None:
        raise AccountsError("declaration_invalid", f"FILE: {reason}; nothing was added")
    if holds is not None:
        # The revision's own strings first (their paths as the revision names them), then every
        # string of the file as copied, which holds fields the revision does not keep (provider, unit).
        for where, text in (*strings(revision), *_file_strings(path)):
            if holds(text):
                raise AccountsError(
                    "declaration_invalid", f"FILE: {where}: must not hold an API key (it holds a run of a declared key); nothing was added"
                )
    return revision


def _file_strings(path):
    """``(field path, text)`` for every string and field name of the file ``add`` copies whole."""
    try:
        data = json.loads(read_limited(path))
    except (OSError, FileProblem, ValueError, RecursionError):
        return [("FILE", "")]  # it changed since it was validated; add refuses it then

    found = []

    def walk(value, where):
        if isinstance(value, str):
            found.append((where, value))
        elif isinstance(value, dict):
            for name, item in value.items():
                inner = f"{where}.{name}" if where else name
                found.append((where or "FILE", name))
                walk(item, inner)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{where}[{index}]")

    walk(data, "")
    return found


def strings(revision):
    """``(field path, text)`` for every string of a revision that is shown or stored."""
    yield "revision", revision.id[len(prices.USER_PREFIX):] if revision.is_user else revision.id
    for index, text in enumerate(revision.sources):
        yield f"sources[{index}]", text
    for index, text in enumerate(revision.notes):
        yield f"notes[{index}]", text
    for index, price in enumerate(revision.models.values()):
        yield f"models[{index}].id", price.id
        yield f"models[{index}].display_name", price.display_name
        for position, alias in enumerate(price.aliases):
            yield f"models[{index}].aliases[{position}]", alias


def add(path, revision, replace=False):
    """Copy the validated file at ``path`` (its bytes, as validated) into the directory as
    ``<revision>.json``, whole or not at all; returns the destination."""
    try:
        raw = read_limited(path)
        same = prices.parse_price_file(raw, prices.USER) == revision
    except (OSError, FileProblem, ValueError):
        same = False
    if not same:
        raise AccountsError("declaration_invalid", "FILE: it changed while it was read; nothing was added")
    directory = prices_dir()
    directory.mkdir(parents=True, exist_ok=True)
    destination = directory / (revision.id[len(prices.USER_PREFIX):] + SUFFIX)
    if destination.exists() and not replace:
        raise AccountsError(
            "declaration_invalid",
            f"price revision {revision.id} already exists ({destination}); add --replace to replace it",
        )
    return write_private_bytes(destination, raw)


def remove(revision_id):
    """Delete the user revision ``revision_id`` (with or without ``user:``); returns its path."""
    name = revision_id[len(prices.USER_PREFIX):] if revision_id.startswith(prices.USER_PREFIX) else revision_id
    if not prices.REVISION_ID.fullmatch(name) or prices.looks_like_key(name):
        # The argument is not repeated: a key pasted as ID must not be echoed.
        raise AccountsError("not_found", "ID: not a price revision id (see llm accounts prices)")
    path = prices_dir() / (name + SUFFIX)
    try:
        path.unlink()
    except FileNotFoundError:
        # Not repeated either: it is the user's text.
        raise AccountsError("not_found", f"ID: no price revision of yours has this id in {prices_dir()} (see llm accounts prices)") from None
    return path
