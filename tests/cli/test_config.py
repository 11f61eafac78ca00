"""`picortex config get|set`: validation, storage, and the per-chat attention hook."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from picortex.cli.config import run_config_get, run_config_set
from picortex.config import RUNTIME_KEYS, Settings, load_settings
from picortex.errors import ConfigError
from picortex.store import Store


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    (tmp_path / "picortex.toml").write_text('wakeword = "?f"\n', encoding="utf-8")
    return load_settings(env={"PICORTEX_HOME": str(tmp_path)})


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    with Store.open(settings.db_path) as opened:
        yield opened


def _get(store: Store, settings: Settings, key: str | None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_config_get(store, settings, key, out, err=err)
    return code, out.getvalue(), err.getvalue()


def _set(store: Store, settings: Settings, key: str, value: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_config_set(store, settings, key, value, out, err=err, now=123.0)
    return code, out.getvalue(), err.getvalue()


def test_get_all_lists_every_runtime_key(store: Store, settings: Settings) -> None:
    code, out, err = _get(store, settings, None)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    prices = [f"prices.{m}.{f}" for m in sorted(settings.prices) for f in ("input", "output")]
    assert [line.split(" = ")[0] for line in lines] == [*RUNTIME_KEYS, *prices]
    assert "prices.claude-opus-5-5.output = 20" in lines
    assert "wakeword = ?f" in lines
    assert "attention.group = mentions-only" in lines
    assert "response_policy.sensitive_commands = whitelist, config" in lines
    assert "budget.ceiling_usd = 5" in lines


def test_get_one_key(store: Store, settings: Settings) -> None:
    assert _get(store, settings, "continuation_seconds") == (0, "continuation_seconds = 10\n", "")
    assert _get(store, settings, " Cache_Max_Bytes ") == (0, "cache_max_bytes = 52428800\n", "")
    assert _get(store, settings, "owner_id") == (0, "owner_id = (none)\n", "")


def test_get_unknown_key(store: Store, settings: Settings) -> None:
    code, out, err = _get(store, settings, "colour")
    assert (code, out) == (2, "")
    assert err == 'unknown config key "colour"\n'


def test_secrets_cannot_be_read(store: Store, settings: Settings) -> None:
    assert _get(store, settings, "discord_token")[0] == 2
    assert _get(store, settings, "anthropic_api_key")[0] == 2


def test_set_stores_the_value_and_get_shows_it(store: Store, settings: Settings) -> None:
    assert _set(store, settings, "attention.group", "discriminate") == (
        0,
        "attention.group = discriminate\n",
        "",
    )
    assert _set(store, settings, "Poll_Enabled", "yes") == (0, "poll_enabled = true\n", "")
    assert store.runtime_config() == {"attention.group": "discriminate", "poll_enabled": "true"}
    assert _get(store, settings, "attention.group") == (
        0,
        "attention.group = discriminate  (runtime)\n",
        "",
    )
    _, listing, _ = _get(store, settings, None)
    assert "poll_enabled = true  (runtime)" in listing.splitlines()
    assert "wakeword = ?f" in listing.splitlines()
    loaded = load_settings(
        env={"PICORTEX_HOME": str(settings.home)}, overrides=store.runtime_config()
    )
    assert (loaded.attention.group, loaded.poll_enabled) == ("discriminate", True)


def test_set_normalises_the_stored_text(store: Store, settings: Settings) -> None:
    _set(store, settings, "response_policy.sensitive_commands", " Whitelist ,poll,,")
    _set(store, settings, "continuation_seconds", "15.0")
    assert store.runtime_config() == {
        "continuation_seconds": "15",
        "response_policy.sensitive_commands": "whitelist, poll",
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("wakeword", "a b", 'wakeword must be 1-8 characters without spaces, got "a b"'),
        ("continuation_seconds", "-2", "continuation_seconds must be a number of seconds"),
        ("attention.dm", "loud", "attention.dm must be one of always, mentions-only"),
        ("budget.period", "week", 'budget.period must be "day" or "month", got "week"'),
        ("colour", "red", 'unknown config key "colour"'),
        ("cache_max_bytes", "1", "cache_max_bytes can only be set in picortex.toml"),
        ("attention.123", "loud", "attention.123 must be one of always, mentions-only"),
    ],
)
def test_set_refuses_bad_keys_and_values(
    store: Store, settings: Settings, key: str, value: str, message: str
) -> None:
    code, out, err = _set(store, settings, key, value)
    assert (code, out) == (2, "")
    assert message in err
    assert err.count("\n") == 1
    assert store.runtime_config() == {}
    assert store.chat_configs() == []


def test_set_override_and_remove_it(store: Store, settings: Settings) -> None:
    assert _set(store, settings, "response_policy.overrides.Poll", "dm")[1] == (
        "response_policy.overrides.poll = dm\n"
    )
    _, listing, _ = _get(store, settings, None)
    assert "response_policy.overrides.poll = dm  (runtime)" in listing.splitlines()
    assert _set(store, settings, "response_policy.overrides.poll", "none")[0] == 0
    assert store.runtime_config() == {"response_policy.overrides.poll": "none"}
    assert _get(store, settings, "response_policy.overrides.poll")[1] == (
        "response_policy.overrides.poll = (none)  (runtime)\n"
    )


def test_set_chat_attention_writes_chat_config(store: Store, settings: Settings) -> None:
    assert _get(store, settings, "attention.555")[1] == (
        "attention.555 = (not set: attention.dm or attention.group applies)\n"
    )
    assert _set(store, settings, "attention.555", "Silent") == (0, "attention.555 = silent\n", "")
    chat = store.get_chat_config(555)
    assert chat is not None
    assert (chat.attention_mode, chat.updated_at) == ("silent", 123.0)
    assert _get(store, settings, "attention.555")[1] == "attention.555 = silent\n"
    assert store.runtime_config() == {}


def test_set_chat_attention_uses_the_hook(store: Store, settings: Settings) -> None:
    calls: list[tuple[int, str]] = []

    def hook(chat_id: int, value: str) -> str:
        calls.append((chat_id, value))
        if value == "bad":
            raise ConfigError("attention.9 must be a mode, got bad")
        return f"chat {chat_id} now {value}"

    out, err = io.StringIO(), io.StringIO()
    assert run_config_set(store, settings, "attention.9", "always", out, chat_mode_setter=hook) == 0
    assert out.getvalue() == "chat 9 now always\n"
    assert (
        run_config_set(store, settings, "attention.9", "bad", out, err=err, chat_mode_setter=hook)
        == 2
    )
    assert err.getvalue() == "attention.9 must be a mode, got bad\n"
    assert calls == [(9, "always"), (9, "bad")]
    assert store.chat_configs() == []


def test_get_reports_a_bad_stored_value(store: Store, settings: Settings) -> None:
    store.set_runtime_config("wakeword", "a b")
    code, out, err = _get(store, settings, None)
    assert (code, out) == (2, "")
    assert "(runtime config): wakeword must be 1-8 characters" in err
    # ...and `config set` can repair it.
    assert _set(store, settings, "wakeword", "!s")[0] == 0
    assert _get(store, settings, "wakeword")[1] == "wakeword = !s  (runtime)\n"


def test_set_writes_errors_to_stderr_by_default(
    store: Store, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_config_set(store, settings, "nope", "1", io.StringIO()) == 2
    assert capsys.readouterr().err == 'unknown config key "nope"\n'


@pytest.mark.parametrize("char", ["\u202e", "\x9b", "\x1b"])
def test_get_escapes_what_it_prints(store: Store, settings: Settings, char: str) -> None:
    # A value stored by an older version, and a key typed with a stray character: whatever
    # comes back, no control character reaches the terminal.
    store.set_runtime_config("wakeword", f"!{char}s")
    printed = [_get(store, settings, None), _get(store, settings, "wakeword")]
    printed.append(_get(store, settings, f"wake{char}word"))
    for code, out, err in printed:
        assert code == 2
        assert char not in out + err
        assert f"\\u{ord(char):04x}" in err
