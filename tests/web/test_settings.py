"""The settings page's view: groups, sources, bounds and which submitted values changed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from picortex.config import RUNTIME_KEYS, Settings, runtime_values
from picortex.web.settings import (
    DEFAULT,
    FILE,
    RUNTIME,
    changed_values,
    file_keys,
    group_of,
    settings_view,
)


def test_every_runtime_key_and_price_is_in_exactly_one_group(tmp_path: Path) -> None:
    values = runtime_values(Settings(home=tmp_path))
    groups = settings_view(values, {}, frozenset())
    shown = [s.key for g in groups for s in g.settings]
    assert sorted(shown) == sorted(values)
    assert set(RUNTIME_KEYS) <= set(shown)
    by_name = {g.name: [s.key for s in g.settings] for g in groups}
    assert by_name["wakeword"] == ["wakeword"]
    assert by_name["poll"] == ["poll_enabled", "poll_seconds"]
    assert "context_messages" in by_name["conversation"]
    assert "budget.user_requests_per_minute" in by_name["budget"]
    assert "prices.claude-opus-5-5.output" in by_name["prices"]


def test_a_key_added_to_the_table_later_shows_in_its_sections_group() -> None:
    values = {"wakeword": "!s", "agent.max_tokens": "1024", "zeta_tools.depth": "2"}
    groups = settings_view(values, {}, frozenset())
    assert [(g.name, g.title) for g in groups] == [
        ("wakeword", "Wakeword"),
        ("agent", "Agent"),
        ("zeta_tools", "Zeta tools"),
    ]
    # A key the table does not know yet is still shown and edited, as text.
    [depth] = groups[2].settings
    assert (depth.bounds.kind, depth.allowed, depth.owner_only) == ("text", "", False)
    assert group_of("models.general") == "models"


def test_owner_only_keys_are_marked_as_the_executor_decides() -> None:
    values = {
        "wakeword": "!s",
        "budget.period": "day",
        "models.general": "m",
        "prices.m.input": "1",
    }
    marked = {
        s.key: s.owner_only for g in settings_view(values, {}, frozenset()) for s in g.settings
    }
    assert marked == {
        "wakeword": False,
        "budget.period": True,
        "models.general": True,
        "prices.m.input": True,
    }


def test_amounts_are_dollars() -> None:
    values = {"budget.global_ceiling_usd": "20", "prices.m.output": "0.5", "poll_seconds": "120"}
    allowed = {s.key: s.allowed for g in settings_view(values, {}, frozenset()) for s in g.settings}
    assert allowed == {
        "budget.global_ceiling_usd": "$0.00 to $100000.00",
        "prices.m.output": "$0.00 to $1000.00",
        "poll_seconds": "0 to 604800",
    }


def test_a_runtime_change_wins_over_the_file_over_the_default(tmp_path: Path) -> None:
    path = tmp_path / "picortex.toml"
    path.write_text(
        'wakeword = "!x"\ncontext_chars = 10\n[budget]\nperiod = "month"\n'
        '[prices."m-1"]\ninput = 1.0\n[response_policy.overrides]\nconfig = "dm"\n'
    )
    found = file_keys(path)
    assert found == {
        "wakeword",
        "context_chars",
        "budget.period",
        "prices.m-1.input",
        "response_policy.overrides",
    }
    values = {
        "wakeword": "!p",
        "context_chars": "10",
        "budget.period": "month",
        "poll_seconds": "1",
    }
    sources = {
        s.key: s.source
        for g in settings_view(values, {"wakeword": "!p"}, found)
        for s in g.settings
    }
    assert sources == {
        "wakeword": RUNTIME,
        "context_chars": FILE,
        "budget.period": FILE,
        "poll_seconds": DEFAULT,
    }


def test_a_missing_or_broken_file_sets_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert file_keys(tmp_path / "picortex.toml") == frozenset()
    broken = tmp_path / "broken.toml"
    broken.write_text("wakeword = \n")
    with caplog.at_level(logging.WARNING, logger="picortex.web.settings"):
        assert file_keys(broken) == frozenset()
    assert "cannot tell which settings it holds" in caplog.text


def test_only_changed_keys_are_submitted_in_the_tables_order() -> None:
    current = {"wakeword": "!s", "context_messages": "15", "continuation_seconds": "10"}
    submitted = {
        "csrf": "token",  # not a key: never a change
        "continuation_seconds": "10.0",  # the same value, spelled otherwise
        "context_messages": "20",
        "wakeword": "!p",
        "budget.made_up": "1",
    }
    assert changed_values(submitted, current) == {"wakeword": "!p", "context_messages": "20"}
    assert list(changed_values(submitted, current)) == ["wakeword", "context_messages"]
    # A value that does not parse is a change, so the executor refuses it in words.
    assert changed_values({"context_messages": "lots"}, current) == {"context_messages": "lots"}
    assert changed_values({}, current) == {}
