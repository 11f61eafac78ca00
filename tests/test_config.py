"""Settings from picortex.toml, the environment and runtime overrides; every bad value."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.config import (
    BUILTIN_PRICES,
    RUNTIME_KEYS,
    Price,
    Settings,
    format_value,
    key_bounds,
    load_settings,
    parse_runtime_value,
    runtime_key,
    runtime_values,
)
from picortex.core.shards import ShardSpec
from picortex.errors import ConfigError


def _home(tmp_path: Path, toml: str | None = None) -> dict[str, str]:
    if toml is not None:
        (tmp_path / "picortex.toml").write_text(toml, encoding="utf-8")
    return {"PICORTEX_HOME": str(tmp_path)}


def _get(settings: Settings, key: str) -> object:
    return settings.value_of(key)


DEFAULTS: dict[str, object] = {
    "owner_id": None,
    "wakeword": "!s",
    "continuation_seconds": 10.0,
    "context_messages": 15,
    "context_chars": 4000,
    "fetch_cooldown_seconds": 5.0,
    "cache_max_bytes": 52_428_800,
    "cache_messages_per_channel": 200,
    "action_log_max_bytes": 5_242_880,
    "poll_enabled": False,
    "poll_seconds": 120.0,
    "catch_up_seconds": 120.0,
    "response_policy.default_mode": "channel",
    "response_policy.sensitive_commands": ("whitelist", "config"),
    "response_policy.overrides": {},
    "attention.dm": "always",
    "attention.group": "mentions-only",
    "discriminator.model": "claude-haiku-5-5",
    "discriminator.timeout_seconds": 5.0,
    "discriminator.history": 6,
    "models.triage": "claude-haiku-5-5",
    "models.general": "claude-sonnet-5-5",
    "models.complex": "claude-opus-5-5",
    "models.route": "fixed",
    "composting.threshold": 5,
    "composting.pause_seconds": 600.0,
    "budget.ceiling_usd": 5.0,
    "budget.period": "day",
    "slash.enabled": True,
    "slash.guild_ids": (),
    "cluster.shards": None,
    "cluster.capacity": None,
    "cluster.lease_seconds": 10.0,
}


@pytest.mark.parametrize(("key", "expected"), DEFAULTS.items())
def test_default_of_each_key(tmp_path: Path, key: str, expected: object) -> None:
    settings = load_settings(env=_home(tmp_path))
    assert _get(settings, key) == expected
    assert type(_get(settings, key)) is type(expected) or key == "response_policy.overrides"


def test_defaults_with_an_empty_file_are_the_same(tmp_path: Path) -> None:
    assert load_settings(env=_home(tmp_path, "")) == load_settings(env=_home(tmp_path))


FROM_FILE = [
    ('owner_id = "123456789012345678"', "owner_id", 123456789012345678),
    ("owner_id = 42", "owner_id", 42),
    ('wakeword = "?bot"', "wakeword", "?bot"),
    ("continuation_seconds = 2.5", "continuation_seconds", 2.5),
    ("context_messages = 3", "context_messages", 3),
    ("context_chars = 100", "context_chars", 100),
    ("fetch_cooldown_seconds = 0", "fetch_cooldown_seconds", 0.0),
    ("cache_max_bytes = 1024", "cache_max_bytes", 1024),
    ("cache_messages_per_channel = 50", "cache_messages_per_channel", 50),
    ("action_log_max_bytes = 2048", "action_log_max_bytes", 2048),
    ("poll_enabled = true", "poll_enabled", True),
    ("poll_seconds = 30", "poll_seconds", 30.0),
    ("catch_up_seconds = 0", "catch_up_seconds", 0.0),
    ('[response_policy]\ndefault_mode = "dm"', "response_policy.default_mode", "dm"),
    (
        '[response_policy]\nsensitive_commands = ["poll"]',
        "response_policy.sensitive_commands",
        ("poll",),
    ),
    ('[response_policy]\noverrides = { poll = "dm" }', "response_policy.overrides", {"poll": "dm"}),
    ('[attention]\ndm = "silent"', "attention.dm", "silent"),
    ('[attention]\ngroup = "discriminate-quiet"', "attention.group", "discriminate-quiet"),
    ('[discriminator]\nmodel = "claude-x"', "discriminator.model", "claude-x"),
    ("[discriminator]\ntimeout_seconds = 1.5", "discriminator.timeout_seconds", 1.5),
    ("[discriminator]\nhistory = 2", "discriminator.history", 2),
    ('[models]\ntriage = "t"', "models.triage", "t"),
    ('[models]\ngeneral = "g"', "models.general", "g"),
    ('[models]\ncomplex = "c"', "models.complex", "c"),
    ('[models]\nroute = "auto"', "models.route", "auto"),
    ("[composting]\nthreshold = 0", "composting.threshold", 0),
    ("[composting]\npause_seconds = 60", "composting.pause_seconds", 60.0),
    ("[budget]\nceiling_usd = 0.25", "budget.ceiling_usd", 0.25),
    ('[budget]\nperiod = "month"', "budget.period", "month"),
    ("[slash]\nenabled = false", "slash.enabled", False),
    ('[slash]\nguild_ids = ["81384788765712384", 42]', "slash.guild_ids", (81384788765712384, 42)),
    ('[cluster]\nshards = "0-1,4/8"', "cluster.shards", ShardSpec(ids=(0, 1, 4), count=8)),
    ("[cluster]\ncapacity = 3", "cluster.capacity", 3),
    ("[cluster]\nlease_seconds = 30", "cluster.lease_seconds", 30.0),
]


@pytest.mark.parametrize(("toml", "key", "expected"), FROM_FILE)
def test_each_key_from_the_file(tmp_path: Path, toml: str, key: str, expected: object) -> None:
    settings = load_settings(env=_home(tmp_path, toml))
    assert _get(settings, key) == expected


def test_every_key_is_covered_by_the_file_test() -> None:
    assert {key for _, key, _ in FROM_FILE} == set(DEFAULTS)


BAD = [
    ('wakeword = "a b"', "wakeword", '"a b"'),
    ('wakeword = ""', "wakeword", '""'),
    ('wakeword = "123456789"', "wakeword", '"123456789"'),
    ("wakeword = 5", "wakeword", "5"),
    ('continuation_seconds = "ten"', "continuation_seconds", '"ten"'),
    ("continuation_seconds = -1", "continuation_seconds", "-1"),
    ("continuation_seconds = nan", "continuation_seconds", "got nan"),
    ("continuation_seconds = true", "continuation_seconds", "true"),
    ("fetch_cooldown_seconds = -0.5", "fetch_cooldown_seconds", "-0.5"),
    ("poll_seconds = -3", "poll_seconds", "-3"),
    ("context_messages = 1.5", "context_messages", "1.5"),
    ("context_chars = -1", "context_chars", "-1"),
    ("cache_max_bytes = -1", "cache_max_bytes", "-1"),
    ('cache_messages_per_channel = "many"', "cache_messages_per_channel", '"many"'),
    ("action_log_max_bytes = -5", "action_log_max_bytes", "-5"),
    ('poll_enabled = "yes"', "poll_enabled", '"yes"'),
    ('owner_id = "abc"', "owner_id", '"abc"'),
    ("owner_id = -4", "owner_id", "-4"),
    ("owner_id = 1.5", "owner_id", "1.5"),
    ('[response_policy]\ndefault_mode = "thread"', "response_policy.default_mode", '"thread"'),
    ("[response_policy]\nsensitive_commands = [1]", "response_policy.sensitive_commands", "[1]"),
    ('[response_policy]\noverrides = { poll = "x" }', "response_policy.overrides.poll", '"x"'),
    ('[response_policy]\noverrides = "dm"', "response_policy.overrides", '"dm"'),
    ('[attention]\ngroup = "loud"', "attention.group", '"loud"'),
    ('[attention]\ndm = "Always"', "attention.dm", '"Always"'),
    ('[discriminator]\nmodel = ""', "discriminator.model", '""'),
    ("[discriminator]\ntimeout_seconds = -1", "discriminator.timeout_seconds", "-1"),
    ("[discriminator]\nhistory = -1", "discriminator.history", "-1"),
    ("[models]\ngeneral = 3", "models.general", "3"),
    ("[budget]\nceiling_usd = -1", "budget.ceiling_usd", "-1"),
    ('[budget]\nperiod = "week"', "budget.period", '"week"'),
    ('attention = "always"', "attention", '"always"'),
    ('[prices."m"]\ninput = -1\noutput = 1', "prices.m.input", "-1"),
    ('[prices."m"]\ninput = 1', "prices.m", ""),
    ('prices = "cheap"', "prices", '"cheap"'),
    ('[slash]\nenabled = "no"', "slash.enabled", '"no"'),
    ('[slash]\nguild_ids = ["general"]', "slash.guild_ids", '["general"]'),
    ("[slash]\nguild_ids = 5", "slash.guild_ids", "5"),
    ('[cluster]\nshards = "8/8"', "cluster.shards", "shard 8 is out of range"),
    ("[cluster]\nshards = 3", "cluster.shards", "3"),
    ("[cluster]\ncapacity = 0", "cluster.capacity", "0"),
    ("[cluster]\nlease_seconds = 0.5", "cluster.lease_seconds", "0.5"),
]


@pytest.mark.parametrize(("toml", "key", "got"), BAD)
def test_bad_values_name_the_key_and_the_file(
    tmp_path: Path, toml: str, key: str, got: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=_home(tmp_path, toml))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'picortex.toml'}: {key} ")
    assert got in message
    assert "\n" not in message


def test_wakeword_message_reads_as_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=_home(tmp_path, 'wakeword = "a b"'))
    assert str(info.value).endswith(
        'picortex.toml: wakeword must be 1-8 characters without spaces, got "a b"'
    )


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=_home(tmp_path, "wakeword = \n"))
    assert str(info.value).startswith(f"{tmp_path / 'picortex.toml'}: not valid TOML")
    assert "line 1" in str(info.value)


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "picortex.toml").mkdir()
    with pytest.raises(ConfigError, match=r"picortex\.toml: cannot be read"):
        load_settings(env=_home(tmp_path))


def test_long_bad_values_are_cut(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=_home(tmp_path, f'wakeword = "{"x" * 500}"'))
    assert len(str(info.value)) < 200
    assert str(info.value).endswith('..."') or str(info.value).endswith("...")


@pytest.mark.parametrize(
    ("toml", "unknown"),
    [
        ("colour = 1", "colour"),
        ("[attention]\nloud = true", "attention.loud"),
        ('[prices."claude-haiku-5-5"]\ncached = 1', "prices.claude-haiku-5-5.cached"),
    ],
)
def test_unknown_keys_are_a_logged_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, toml: str, unknown: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="picortex.config"):
        settings = load_settings(env=_home(tmp_path, toml))
    assert settings.wakeword == "!s"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert unknown in warnings[0].getMessage()
    assert "picortex.toml" in warnings[0].getMessage()


# ---- environment ------------------------------------------------------------------------


def test_environment_values(tmp_path: Path) -> None:
    env = {
        **_home(tmp_path),
        "DISCORD_BOT_TOKEN": "tok",
        "DISCORD_API_BASE": "http://127.0.0.1:9/api/v10/",
        "ANTHROPIC_API_KEY": "key",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8",
        "PICORTEX_ACTION_LOG": str(tmp_path / "log" / "a.jsonl"),
        "PICORTEX_CACHE_DIR": str(tmp_path / "c"),
        "PICORTEX_FAULT_INJECT": "mailbox:boom",
    }
    settings = load_settings(env=env)
    assert settings.home == tmp_path
    assert settings.discord_token == "tok"
    assert settings.api_base == "http://127.0.0.1:9/api/v10"
    assert settings.anthropic_api_key == "key"
    assert settings.anthropic_base_url == "http://127.0.0.1:8"
    assert settings.action_log_path == tmp_path / "log" / "a.jsonl"
    assert settings.cache_dir == tmp_path / "c"
    assert settings.db_path == tmp_path / "picortex.db"
    assert settings.fault_inject == "mailbox:boom"


def test_environment_defaults(tmp_path: Path) -> None:
    settings = load_settings(env={**_home(tmp_path), "DISCORD_BOT_TOKEN": ""})
    assert settings.discord_token is None
    assert settings.anthropic_api_key is None
    assert settings.anthropic_base_url is None
    assert settings.api_base == "https://discord.com/api/v10"
    assert settings.action_log_path == tmp_path / "actions.jsonl"
    assert settings.cache_dir == tmp_path / "cache"
    assert settings.fault_inject == ""


def test_home_defaults_to_dot_picortex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_settings(env={}).home == tmp_path / ".picortex"


def test_os_environ_is_the_default_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.setenv("PICORTEX_OWNER_ID", "77")
    settings = load_settings()
    assert settings.home == tmp_path
    assert settings.owner_id == 77


def test_environment_owner_wins_over_the_file(tmp_path: Path) -> None:
    env = {**_home(tmp_path, "owner_id = 1"), "PICORTEX_OWNER_ID": "2"}
    assert load_settings(env=env).owner_id == 2


def test_bad_owner_in_environment_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^PICORTEX_OWNER_ID must be a Discord user id"):
        load_settings(env={**_home(tmp_path), "PICORTEX_OWNER_ID": "me"})


def test_bad_api_base_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^DISCORD_API_BASE must be an http\(s\) URL"):
        load_settings(env={**_home(tmp_path), "DISCORD_API_BASE": "discord.com"})


def test_secrets_never_appear_in_repr_or_str(tmp_path: Path) -> None:
    env = {
        **_home(tmp_path),
        "DISCORD_BOT_TOKEN": "MTIz.secret-token-value",
        "ANTHROPIC_API_KEY": "sk-ant-secret-key-value",
    }
    settings = load_settings(env=env)
    for text in (repr(settings), str(settings), f"{settings}"):
        assert "secret-token-value" not in text
        assert "secret-key-value" not in text
    assert "discord_token='[hidden]'" in repr(settings)
    assert "anthropic_api_key='[hidden]'" in repr(settings)


# ---- prices -----------------------------------------------------------------------------


def test_builtin_prices(tmp_path: Path) -> None:
    settings = load_settings(env=_home(tmp_path))
    assert settings.price_for("claude-haiku-5-5") == Price(0.10, 0.50)
    assert settings.price_for("claude-sonnet-5-5") == Price(2.0, 10.0)
    assert settings.price_for("claude-opus-5-5") == Price(4.0, 20.0)


def test_unknown_model_costs_as_the_dearest(tmp_path: Path) -> None:
    settings = load_settings(env=_home(tmp_path, '[prices."big"]\ninput = 9\noutput = 90'))
    assert settings.price_for("never-heard-of") == Price(9.0, 90.0)
    assert load_settings(env=_home(tmp_path, "")).price_for("x") == Price(4.0, 20.0)


def test_file_prices_merge_with_builtins(tmp_path: Path) -> None:
    toml = '[prices."claude-haiku-5-5"]\ninput = 0.2\n[prices."m"]\ninput = 1\noutput = 2\n'
    settings = load_settings(env=_home(tmp_path, toml))
    assert settings.price_for("claude-haiku-5-5") == Price(0.2, 0.5)
    assert settings.price_for("m") == Price(1.0, 2.0)
    assert settings.price_for("claude-opus-5-5") == BUILTIN_PRICES["claude-opus-5-5"]


def test_runtime_values_are_every_runtime_key_and_each_models_prices(tmp_path: Path) -> None:
    toml = '[prices."m"]\ninput = 1\noutput = 2.5\n'
    values = runtime_values(load_settings(env=_home(tmp_path, toml)))
    assert set(RUNTIME_KEYS) <= set(values)
    assert values["prices.m.input"] == "1"
    assert values["prices.m.output"] == "2.5"
    assert values["attention.group"] == "mentions-only"


def test_price_cost() -> None:
    assert Price(0.10, 0.50).cost(1_000_000, 2_000_000) == pytest.approx(1.10)


# ---- runtime overrides ------------------------------------------------------------------


def test_runtime_overrides_win_over_the_file(tmp_path: Path) -> None:
    env = _home(tmp_path, 'wakeword = "?a"\n[attention]\ngroup = "silent"\n')
    settings = load_settings(env=env, overrides={"wakeword": "!b", "attention.group": "always"})
    assert settings.wakeword == "!b"
    assert settings.attention.group == "always"
    assert settings.attention.dm == "always"


def test_with_runtime_returns_a_new_settings(tmp_path: Path) -> None:
    base = load_settings(env=_home(tmp_path))
    changed = base.with_runtime({"budget.ceiling_usd": "0.5", "poll_enabled": "on"})
    assert (changed.budget.ceiling_usd, changed.poll_enabled) == (0.5, True)
    assert (base.budget.ceiling_usd, base.poll_enabled) == (5.0, False)


def test_override_none_removes_a_file_override(tmp_path: Path) -> None:
    env = _home(tmp_path, '[response_policy]\noverrides = { poll = "dm", speak = "dm" }')
    settings = load_settings(env=env, overrides={"response_policy.overrides.poll": "none"})
    assert dict(settings.response_policy.overrides) == {"speak": "dm"}
    more = settings.with_runtime({"response_policy.overrides.stay": "channel"})
    assert dict(more.response_policy.overrides) == {"speak": "dm", "stay": "channel"}


def test_bad_stored_override_names_the_database_and_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=_home(tmp_path), overrides={"attention.dm": "loud"})
    assert str(info.value).startswith(f"{tmp_path / 'picortex.db'} (runtime config): attention.dm")


def test_unknown_stored_override_is_warned_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="picortex.config"):
        settings = load_settings(env=_home(tmp_path), overrides={"gone.key": "1", "wakeword": "!x"})
    assert settings.wakeword == "!x"
    assert any("gone.key" in r.getMessage() for r in caplog.records)


def test_replies_stream_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    assert load_settings(env=_home(tmp_path)).replies.stream is True
    off = load_settings(env=_home(tmp_path), overrides={"replies.stream": "off"})
    assert off.replies.stream is False


def test_runtime_keys_are_the_documented_set() -> None:
    assert set(RUNTIME_KEYS) == {
        "wakeword",
        "continuation_seconds",
        "context_messages",
        "context_chars",
        "fetch_cooldown_seconds",
        "poll_enabled",
        "poll_seconds",
        "catch_up_seconds",
        "replies.stream",
        "response_policy.default_mode",
        "response_policy.sensitive_commands",
        "attention.dm",
        "attention.group",
        "discriminator.model",
        "discriminator.timeout_seconds",
        "discriminator.history",
        "agent.system_prompt",
        "agent.max_tokens",
        "models.triage",
        "models.general",
        "models.complex",
        "models.route",
        "composting.threshold",
        "composting.pause_seconds",
        "budget.ceiling_usd",
        "budget.period",
        "budget.global_ceiling_usd",
        "budget.user_daily_usd",
        "budget.user_requests_per_minute",
        "access.allow_roles",
        "access.allow_channels",
        "access.deny_channels",
    }


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("wakeword", "?x", "?x"),
        ("continuation_seconds", "2.5", 2.5),
        ("continuation_seconds", "3", 3.0),
        ("context_messages", " 7 ", 7),
        ("poll_enabled", "TRUE", True),
        ("poll_enabled", "off", False),
        ("response_policy.default_mode", "dm", "dm"),
        ("response_policy.sensitive_commands", "whitelist, Poll", ("whitelist", "poll")),
        ("response_policy.sensitive_commands", "", ()),
        ("response_policy.overrides.Poll", "dm", "dm"),
        ("response_policy.overrides.poll", "none", None),
        ("attention.group", "discriminate", "discriminate"),
        ("discriminator.history", "0", 0),
        ("models.complex", "claude-opus-5-5", "claude-opus-5-5"),
        ("models.route", " auto ", "auto"),
        ("composting.threshold", "3", 3),
        ("composting.pause_seconds", "90", 90.0),
        ("budget.ceiling_usd", "0.01", 0.01),
        ("budget.period", "month", "month"),
        ("Budget.Period", "day", "day"),
    ],
)
def test_parse_runtime_value(key: str, text: str, expected: object) -> None:
    assert parse_runtime_value(key, text) == expected


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("wakeword", "a b", 'wakeword must be 1-8 characters without spaces, got "a b"'),
        ("continuation_seconds", "-1", "continuation_seconds must be a number of seconds"),
        ("continuation_seconds", "inf", "continuation_seconds must be a number of seconds"),
        ("context_messages", "1.5", "context_messages must be a whole number"),
        ("poll_enabled", "maybe", 'poll_enabled must be true or false, got "maybe"'),
        ("attention.dm", "loud", "attention.dm must be one of always, mentions-only"),
        ("response_policy.default_mode", "x", 'must be "channel" or "dm"'),
        ("response_policy.overrides.poll", "x", 'response_policy.overrides.poll must be "channel"'),
        ("response_policy.sensitive_commands", "a b", "must be a list of lowercase command"),
        ("budget.period", "week", 'budget.period must be "day" or "month", got "week"'),
        ("models.general", " ", "models.general must be a model id"),
        ("nope", "1", 'unknown config key "nope"'),
        ("cache_max_bytes", "1", "cache_max_bytes can only be set in picortex.toml"),
        ("owner_id", "1", "owner_id can only be set in picortex.toml"),
        ("response_policy.overrides.", "dm", "needs a lowercase command name"),
    ],
)
def test_parse_runtime_value_errors(key: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_runtime_value(key, text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_runtime_key_canonical_form() -> None:
    assert runtime_key(" Attention.Group ") == "attention.group"
    assert runtime_key("response_policy.overrides.POLL") == "response_policy.overrides.poll"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "true"),
        (False, "false"),
        (10.0, "10"),
        (0.1, "0.1"),
        (0.000001, "0.000001"),  # shown to people too: never `1e-06`
        (1.5e-7, "0.00000015"),
        (15, "15"),
        ("!s", "!s"),
        (("whitelist", "config"), "whitelist, config"),
        ({"poll": "dm"}, "poll=dm"),
        (Price(0.1, 0.5), "input=0.1, output=0.5"),
        (Path("/x/y"), "/x/y"),
    ],
)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text


@given(
    key=st.sampled_from(sorted(RUNTIME_KEYS)),
    data=st.data(),
)
def test_format_value_round_trips_through_parse(key: str, data: st.DataObject) -> None:
    # Values that were accepted once must read back the same after being stored as text.
    text = data.draw(
        st.one_of(
            st.text(max_size=12),
            st.integers(-5, 10**9).map(str),
            st.floats(0, 1e6, allow_nan=False).map(repr),
            st.sampled_from(["true", "no", "dm", "channel", "always", "silent", "month", "a,b"]),
        )
    )
    try:
        value = parse_runtime_value(key, text)
    except ConfigError:
        return
    assert parse_runtime_value(key, format_value(value)) == value


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("context_chars", "100000000"),
        ("context_messages", "1000"),
        ("discriminator.history", "1000"),
        ("continuation_seconds", "86400"),
        ("fetch_cooldown_seconds", "86400"),
        ("discriminator.timeout_seconds", "600"),
        ("poll_seconds", "100000000"),
        ("budget.ceiling_usd", "1000000"),
        ("budget.global_ceiling_usd", "10000000"),
        ("budget.user_daily_usd", "1000000"),
        ("budget.user_requests_per_minute", "100000"),
        ("composting.threshold", "1001"),
        ("composting.pause_seconds", "86401"),
    ],
)
def test_numbers_have_upper_bounds_at_runtime(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_runtime_value(key, value)
    message = str(caught.value)
    assert message.startswith(f"{key} must be at most ")
    assert message.endswith(f"got {value}")


@pytest.mark.parametrize(
    "toml",
    [
        "context_chars = 100000000",
        "cache_max_bytes = 99999999999999",
        "action_log_max_bytes = 99999999999999",
        "cache_messages_per_channel = 1000000",
        "[discriminator]\nhistory = 999",
        "[budget]\nceiling_usd = 1e9",
        '[prices."claude-haiku-5-5"]\ninput = 1e9\noutput = 1',
    ],
)
def test_numbers_have_upper_bounds_in_the_file(tmp_path: Path, toml: str) -> None:
    (tmp_path / "picortex.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"PICORTEX_HOME": str(tmp_path)})
    assert "must be at most" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_prices_can_be_set_at_runtime_within_bounds(tmp_path: Path) -> None:
    assert runtime_key(" prices.claude-opus-5-5.INPUT ") == "prices.claude-opus-5-5.input"
    assert parse_runtime_value("prices.claude-opus-5-5.output", "25") == 25.0
    settings = load_settings(
        {"PICORTEX_HOME": str(tmp_path)},
        overrides={"prices.claude-opus-5-5.input": "3", "prices.my-model.output": "7"},
    )
    assert settings.prices["claude-opus-5-5"] == Price(3.0, 20.0)
    assert settings.prices["my-model"] == Price(3.0, 7.0)  # the dearest known for the rest
    assert settings.value_of("prices.my-model.output") == 7.0
    for bad in ("prices.x.input", "prices..input", "prices.x.cache"):
        with pytest.raises(ConfigError):
            parse_runtime_value(bad, "5000" if bad == "prices.x.input" else "1")


# Control (Cc) and format (Cf) characters: a NUL, an escape, a zero-width space, a
# right-to-left override, a byte-order mark, a soft hyphen.
INVISIBLE = ["\x00", "\x1b", "\u200b", "\u202e", "\ufeff", "\u00ad"]


@pytest.mark.parametrize("char", INVISIBLE)
@pytest.mark.parametrize(
    ("key", "clean"),
    [
        ("wakeword", "!s"),
        ("discriminator.model", "claude-haiku-5-5"),
        ("models.general", "claude-sonnet-5-5"),
    ],
)
def test_text_keys_refuse_control_and_format_characters(
    tmp_path: Path, key: str, clean: str, char: str
) -> None:
    dirty = clean[:1] + char + clean[1:]
    sentence = f"{key} must not contain control or format characters (U+{ord(char):04X})"
    with pytest.raises(ConfigError, match=re.escape(sentence)):
        parse_runtime_value(key, dirty)
    section, _, name = key.rpartition(".")
    toml = (f"[{section}]\n" if section else "") + f"{name} = {json.dumps(dirty)}\n"
    with pytest.raises(ConfigError, match=f"picortex.toml: {key} must not contain") as info:
        load_settings(env=_home(tmp_path, toml))
    assert "\n" not in str(info.value)
    (tmp_path / "picortex.toml").unlink()
    with pytest.raises(ConfigError, match="runtime config"):
        load_settings(env=_home(tmp_path), overrides={key: dirty})


@pytest.mark.parametrize("char", INVISIBLE)
def test_price_model_names_refuse_control_and_format_characters(tmp_path: Path, char: str) -> None:
    model = f"my{char}model"
    with pytest.raises(ConfigError):
        runtime_key(f"prices.{model}.input")
    toml = f"[prices.{json.dumps(model)}]\ninput = 1\noutput = 2\n"
    with pytest.raises(ConfigError, match="must not contain control or format"):
        load_settings(env=_home(tmp_path, toml))


# ----- bounds, as the panel's settings form shows them ---------------------------------------


@pytest.mark.parametrize("key", [*RUNTIME_KEYS, "prices.claude-haiku-5-5.input"])
def test_every_runtime_key_has_bounds_that_validation_keeps(key: str) -> None:
    bounds = key_bounds(key)
    assert bounds.describe(), key  # every key says what it accepts
    if bounds.kind in ("number", "count"):
        assert bounds.maximum is not None and bounds.minimum is not None
        top = format_value(bounds.maximum)
        assert parse_runtime_value(key, top) == bounds.maximum
        low = format_value(bounds.minimum)
        assert parse_runtime_value(key, low) == bounds.minimum
        for outside in (format_value(bounds.maximum + 1), format_value(bounds.minimum - 1)):
            with pytest.raises(ConfigError):
                parse_runtime_value(key, outside)
    elif bounds.kind in ("choice", "bool"):
        options = bounds.choices or ("true", "false")
        for option in options:
            assert format_value(parse_runtime_value(key, option)) == option
        with pytest.raises(ConfigError):
            parse_runtime_value(key, "none-of-these")
    elif bounds.kind == "text" and bounds.maximum is not None:
        longest = "x" * int(bounds.maximum)
        assert parse_runtime_value(key, longest) == longest
        with pytest.raises(ConfigError):
            parse_runtime_value(key, longest + "x")


def test_bounds_in_words() -> None:
    assert key_bounds("context_messages").describe() == "a whole number, 0 to 100"
    assert key_bounds("continuation_seconds").describe() == "0 to 3600"
    assert key_bounds("budget.period").describe() == "one of day, month"
    assert key_bounds("wakeword").describe() == "1-8 characters without spaces"
    assert key_bounds("response_policy.overrides.config").choices == ("channel", "dm", "none")
    assert key_bounds("web.port").maximum == 65535
    with pytest.raises(ConfigError, match="unknown config key"):
        key_bounds("no_such_key")


# ----- [agent]: the owner's voice (SPEC 18) --------------------------------------------------


def test_agent_prompt_and_max_tokens_from_the_file(tmp_path: Path) -> None:
    toml = '[agent]\nsystem_prompt = """You are {{bot_name}}.\n\tBe brief."""\nmax_tokens = 300\n'
    settings = load_settings(_home(tmp_path, toml))
    assert settings.agent.system_prompt == "You are {{bot_name}}.\n\tBe brief."
    assert settings.agent.max_tokens == 300


def test_agent_prompt_from_a_file_in_the_home(tmp_path: Path) -> None:
    (tmp_path / "voice.md").write_text("Speak like a pirate.\n", encoding="utf-8")
    settings = load_settings(_home(tmp_path, '[agent]\nsystem_prompt_file = "voice.md"\n'))
    assert settings.agent.system_prompt == "Speak like a pirate.\n"


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        ('[agent]\nsystem_prompt_file = "missing.md"\n', "missing.md.*cannot be read"),
        ('[agent]\nsystem_prompt_file = "../x.md"\n', "inside PICORTEX_HOME"),
        ('[agent]\nsystem_prompt = "a"\nsystem_prompt_file = "v.md"\n', "not both"),
        ("[agent]\nmax_tokens = 0\n", "1 or more"),
        ("[agent]\nmax_tokens = 40000\n", "at most 32000"),
        ('[agent]\nsystem_prompt = "a\\u0000b"\n', "control or format"),
    ],
)
def test_bad_agent_settings_are_one_sentence(tmp_path: Path, toml: str, error: str) -> None:
    (tmp_path / "v.md").write_text("v", encoding="utf-8")
    with pytest.raises(ConfigError, match=error):
        load_settings(_home(tmp_path, toml))


def test_agent_settings_change_at_runtime_but_the_file_path_does_not() -> None:
    assert parse_runtime_value("agent.system_prompt", "Line one\nline two") == (
        "Line one\nline two"
    )
    assert parse_runtime_value("agent.max_tokens", "512") == 512
    with pytest.raises(ConfigError, match="at most 8000"):
        parse_runtime_value("agent.system_prompt", "x" * 8001)
    with pytest.raises(ConfigError, match=r"can only be set in picortex\.toml"):
        runtime_key("agent.system_prompt_file")
