"""What a user price revision may not do to a shipped model (issue 33 point 2; docs/pricing.md
"Your own price revisions"): declare a smaller context window or maximum output than the shipped
table (the ceiling prices the whole window, so a smaller one let a 60,000-token prompt through on
a ceiling of a fraction of a cent), price anything at zero without saying it prices a free model
on purpose, or name a shipped model in another case (which made it a separately priced model).
And ``prices add`` says on stderr when it replaces a shipped price, old -> new rates.

Each rule holds for ``prices add`` and for a file put in the price directory by hand.
"""

import copy
import json

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts.pricing import price_book, prices, user_prices

HAIKU = "claude-haiku-4-5-20251001"  # shipped: 200,000-token window, 64,000 output, $1 / $5
SHIPPED_HAIKU_RATES = {"input": 1000, "write_5m": 1250, "write_1h": 2000, "cache_read": 100, "output": 5000}
CUT_RATES = {"input": 800, "write_5m": 1000, "write_1h": 1600, "cache_read": 80, "output": 4000}
NOVA = "claude-nova-6"  # no shipped revision knows it

HAIKU_OVERRIDE = {
    "revision": "haiku-cut",
    "applies_from": "2026-12-05",
    "overrides_shipped": True,
    "models": [
        {
            "id": HAIKU,
            "aliases": ["claude-haiku-4-5"],
            "context_window": 200000,
            "max_output": 64000,
            "status": "active",
            "rates": CUT_RATES,
        }
    ],
}
NOVA_REVISION = {
    "revision": "nova",
    "applies_from": "2026-12-05",
    "models": [
        {
            "id": NOVA,
            "context_window": 400000,
            "max_output": 32000,
            "status": "active",
            "rates": {"input": 2000, "write_5m": 2500, "write_1h": 4000, "cache_read": 200, "output": 10000},
        }
    ],
}


def revision(base=HAIKU_OVERRIDE, **model_changes):
    data = copy.deepcopy(base)
    data["models"][0].update(model_changes)
    return data


def add(tmp_path, data):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    return CliRunner().invoke(cli, ["accounts", "prices", "add", str(path)], catch_exceptions=False)


def refused_line(result):
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert not user_prices.prices_dir().exists() or not any(user_prices.prices_dir().iterdir())
    return line


def by_hand(data):
    user_prices.prices_dir().mkdir(parents=True, exist_ok=True)
    (user_prices.prices_dir() / f"{data['revision']}.json").write_text(json.dumps(data))


# Windows and maximum output no smaller than the shipped table's ------------------------------


@pytest.mark.parametrize(
    "changes, field, figure",
    [
        ({"context_window": 1000}, "context_window", "200,000"),
        ({"context_window": 199999}, "context_window", "200,000"),
        ({"max_output": 8000}, "max_output", "64,000"),
        # Named only by an alias of the shipped model: the same model.
        ({"id": "my-haiku", "aliases": ["claude-haiku-4-5"], "context_window": 1000}, "context_window", "200,000"),
    ],
    ids=["window", "window-by-one", "max-output", "by-alias"],
)
def test_a_user_revision_smaller_than_the_shipped_model_is_refused_naming_the_field_and_rule(
    user_path, tmp_path, changes, field, figure
):
    line = refused_line(add(tmp_path, revision(**changes)))
    assert line.startswith(f"Error: declaration_invalid: FILE: models[0].{field}: must be at least the shipped ")
    assert f"({figure} tokens)" in line and line.endswith("; nothing was added")


def test_a_window_as_large_as_the_shipped_one_or_larger_is_accepted(user_path, tmp_path):
    result = add(tmp_path, revision(context_window=300000, max_output=64000))
    assert result.exit_code == 0, result.output


def test_a_smaller_window_put_in_by_hand_is_not_used_so_the_ceiling_stays_the_shipped_one(user_path, monkeypatch):
    import datetime

    from llm_accounts import clock
    from llm_accounts.ladder import quote_for

    monkeypatch.setattr(clock, "now", lambda: datetime.datetime(2026, 12, 6, tzinfo=datetime.timezone.utc))
    by_hand(revision(context_window=1000))
    book = price_book.current()
    assert book.revision_of(HAIKU) is book.shipped
    [problem] = book.problems
    assert "haiku-cut.json" in problem.message and "models[0].context_window: must be at least the shipped" in problem.message
    assert quote_for(HAIKU, book).ceiling_nusd == quote_for(HAIKU, prices.current_revision()).ceiling_nusd


# Zero rates only for a model priced free on purpose ------------------------------------------


@pytest.mark.parametrize(
    "base, rates, field",
    [
        (HAIKU_OVERRIDE, {name: 0 for name in CUT_RATES}, "rates.input"),
        (NOVA_REVISION, {**NOVA_REVISION["models"][0]["rates"], "cache_read": 0}, "rates.cache_read"),
        (NOVA_REVISION, {**NOVA_REVISION["models"][0]["rates"], "output": "0/7"}, "rates.output"),
    ],
    ids=["all-zero-override", "one-zero-new-model", "zero-fraction"],
)
def test_a_zero_rate_is_refused_unless_the_model_is_free_on_purpose(user_path, tmp_path, base, rates, field):
    line = refused_line(add(tmp_path, revision(base, rates=rates)))
    assert line == (
        f"Error: declaration_invalid: FILE: models[0].{field}: must not be zero unless the model says "
        '"free": true (it prices a free model on purpose); nothing was added'
    )


def test_a_zero_long_context_rate_is_refused_too(user_path, tmp_path):
    tier = {"above_input_tokens": 200000, "rates": {**NOVA_REVISION["models"][0]["rates"], "write_1h": 0}}
    line = refused_line(add(tmp_path, revision(NOVA_REVISION, long_context=tier)))
    assert "models[0].long_context.rates.write_1h: must not be zero unless" in line


def test_a_model_that_says_it_is_free_may_be_priced_at_zero(user_path, tmp_path):
    result = add(tmp_path, revision(NOVA_REVISION, rates={name: 0 for name in CUT_RATES}, free=True))
    assert result.exit_code == 0, result.output
    assert price_book.current().model(NOVA).rates == prices.Rates(0, 0, 0, 0, 0)


def test_free_must_be_true_or_false(user_path, tmp_path):
    line = refused_line(add(tmp_path, revision(NOVA_REVISION, free="yes")))
    assert line == "Error: declaration_invalid: FILE: models[0].free: must be true or false; nothing was added"


def test_all_zero_rates_put_in_by_hand_do_not_make_a_shipped_model_free(user_path, monkeypatch):
    import datetime

    from llm_accounts import clock

    monkeypatch.setattr(clock, "now", lambda: datetime.datetime(2026, 12, 6, tzinfo=datetime.timezone.utc))
    by_hand(revision(rates={name: 0 for name in CUT_RATES}))
    book = price_book.current()
    assert book.model("claude-haiku-4-5").rates == prices.Rates(**SHIPPED_HAIKU_RATES)


# Replacing a shipped price is said, old -> new ------------------------------------------------


def test_prices_add_says_on_stderr_which_shipped_price_it_replaces_old_to_new(user_path, tmp_path):
    result = add(tmp_path, HAIKU_OVERRIDE)
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"llm-accounts: user:haiku-cut replaces the shipped price of {HAIKU} (anthropic-2026-11-29) from 2026-12-05, "
        "USD per million tokens: input 1.00 -> 0.80, write_5m 1.25 -> 1.00, write_1h 2.00 -> 1.60, "
        "cache_read 0.10 -> 0.08, output 5.00 -> 4.00"
    ]


def test_prices_add_says_it_replaces_a_shipped_price_named_only_by_its_alias(user_path, tmp_path):
    only_alias = copy.deepcopy(HAIKU_OVERRIDE)
    only_alias["models"][0].update(id="my-haiku", aliases=["claude-haiku-4-5"])
    result = add(tmp_path, only_alias)
    assert result.exit_code == 0, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"llm-accounts: user:haiku-cut replaces the shipped price of {HAIKU} (anthropic-2026-11-29)")


def test_prices_add_says_nothing_of_shipped_prices_for_a_new_model_or_one_it_does_not_override(user_path, tmp_path):
    assert add(tmp_path, NOVA_REVISION).stderr == ""
    not_overriding = copy.deepcopy(HAIKU_OVERRIDE)
    not_overriding.update(revision="haiku-plain", overrides_shipped=False)
    result = add(tmp_path, not_overriding)
    assert result.exit_code == 0 and result.stderr == ""


# A shipped model's name in another case ------------------------------------------------------


@pytest.mark.parametrize(
    "changes, field, shipped",
    [
        ({"id": "Claude-Haiku-4-5"}, "id", "claude-haiku-4-5"),
        ({"id": "CLAUDE-HAIKU-4-5-20251001", "aliases": []}, "id", HAIKU),
        ({"id": "my-haiku", "aliases": ["Claude-Sonnet-4-6"]}, "aliases[0]", "claude-sonnet-4-6"),
    ],
    ids=["alias-cased", "id-upper", "alias-of-another"],
)
def test_a_shipped_model_name_in_another_case_is_refused(user_path, tmp_path, changes, field, shipped):
    line = refused_line(add(tmp_path, revision(**changes)))
    assert line == (
        f"Error: declaration_invalid: FILE: models[0].{field}: differs only by case from the shipped model name "
        f"{shipped}; model names are matched against the shipped ones ignoring case, so use its exact spelling; "
        "nothing was added"
    )
    assert "Claude-" not in line and "CLAUDE-" not in line  # the file's own text is never repeated


def test_two_names_of_one_file_that_differ_only_by_case_are_refused(user_path, tmp_path):
    data = revision(NOVA_REVISION, aliases=["Claude-Nova-6"])
    line = refused_line(add(tmp_path, data))
    assert line == (
        "Error: declaration_invalid: FILE: models[0].aliases[0]: differs only by case from models[0]'s name; "
        "model names are matched ignoring case; nothing was added"
    )


def test_a_cased_shipped_name_put_in_by_hand_is_not_a_separate_model(user_path):
    by_hand(revision(NOVA_REVISION, id="Claude-Haiku-4-5"))
    book = price_book.current()
    assert book.model("Claude-Haiku-4-5") is None
    assert len(book.problems) == 1
