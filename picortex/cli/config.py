"""`picortex config get [KEY]` and `config set KEY VALUE`: runtime config kept in `picortex.db`."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from typing import Final, TextIO

from picortex.cli import common
from picortex.config import (
    ATTENTION_MODES,
    NO_OVERRIDE,
    OVERRIDES_PREFIX,
    PRICE_FIELDS,
    PRICES_PREFIX,
    RUNTIME_KEYS,
    Settings,
    format_value,
    parse_runtime_value,
    runtime_key,
)
from picortex.core.terminal import clean_line
from picortex.errors import ConfigError
from picortex.store import AdminQueries

CHAT_ATTENTION_KEY: Final = re.compile(r"attention\.(\d+)")
"""`attention.<chat_id>`: one chat's own attention mode, kept in `chat_config`."""

ChatModeSetter = Callable[[int, str], str]
"""Sets one chat's attention mode: (chat_id, mode text) -> the line to print.

Raises ConfigError (one sentence) for a bad mode. The default only writes `chat_config`;
the app may pass one that also prepares the chat home and its discriminator prompt.
"""


def _print(stream: TextIO, text: object) -> None:
    """One line, control characters escaped: stored values and model names may hold any."""
    stream.write(clean_line(str(text)) + "\n")


def _shown(value: object) -> str:
    text = format_value(value)
    return text if text else "(none)"


def _chat_id(key: str) -> int | None:
    match = CHAT_ATTENTION_KEY.fullmatch(key.strip().lower())
    return int(match.group(1)) if match else None


def run_config_get(
    store: AdminQueries,
    settings: Settings,
    key: str | None,
    out: TextIO,
    *,
    err: TextIO | None = None,
) -> int:
    """Print one key (any key of `picortex.toml`) or every runtime key with its value.

    `settings` may come with or without the stored overrides: they are applied here.
    Values set at runtime are marked `(runtime)`. Returns 0, or 2 for an unknown key.
    """
    err = sys.stderr if err is None else err
    stored = store.runtime_config()
    try:
        effective = settings.with_runtime(stored)
    except ConfigError as exc:
        _print(err, exc)
        return 2
    if key is None:
        for name in RUNTIME_KEYS:
            mark = "  (runtime)" if name in stored else ""
            _print(out, f"{name} = {_shown(effective.value_of(name))}{mark}")
        for command, mode in sorted(effective.response_policy.overrides.items()):
            name = OVERRIDES_PREFIX + command
            mark = "  (runtime)" if name in stored else ""
            _print(out, f"{name} = {mode}{mark}")
        for model, price in sorted(effective.prices.items()):
            for field in PRICE_FIELDS:
                name = f"{PRICES_PREFIX}{model}.{field}"
                mark = "  (runtime)" if name in stored else ""
                _print(out, f"{name} = {_shown(getattr(price, field))}{mark}")
        return 0
    chat_id = _chat_id(key)
    if chat_id is not None:
        chat = store.get_chat_config(chat_id)
        if chat is None or chat.attention_mode is None:
            _print(out, f"attention.{chat_id} = (not set: attention.dm or attention.group applies)")
        else:
            _print(out, f"attention.{chat_id} = {chat.attention_mode}")
        return 0
    name = key.strip().lower()
    try:
        value = effective.value_of(name)
    except ConfigError as exc:
        _print(err, exc)
        return 2
    mark = "  (runtime)" if name in stored else ""
    _print(out, f"{name} = {_shown(value)}{mark}")
    return 0


def _store_chat_mode(store: AdminQueries, now: float) -> ChatModeSetter:
    def set_mode(chat_id: int, text: str) -> str:
        mode = text.strip().lower()
        if mode not in ATTENTION_MODES:
            raise ConfigError(
                f"attention.{chat_id} must be one of {', '.join(ATTENTION_MODES)}, got {text!r}"
            )
        store.set_attention_mode(chat_id, mode, now)
        return f"attention.{chat_id} = {mode}"

    return set_mode


def run_config_set(
    store: AdminQueries,
    settings: Settings,
    key: str,
    value: str,
    out: TextIO,
    *,
    err: TextIO | None = None,
    now: float | None = None,
    chat_mode_setter: ChatModeSetter | None = None,
) -> int:
    """Validate and store one runtime value, then print `key = value`.

    `attention.<chat_id>` sets that chat's mode through `chat_mode_setter` (default: write
    `chat_config` only). Returns 0, or 2 with one sentence on `err` for an unknown key or
    a bad value.
    """
    err = sys.stderr if err is None else err
    chat_id = _chat_id(key)
    try:
        if chat_id is not None:
            setter = chat_mode_setter or _store_chat_mode(
                store, time.time() if now is None else now
            )
            _print(out, setter(chat_id, value))
            return 0
        name = runtime_key(key)
        parsed = parse_runtime_value(name, value)
        text = NO_OVERRIDE if parsed is None else format_value(parsed)
        # What is stored must load again at start-up: check the round trip before writing.
        settings.with_runtime({name: text})
    except ConfigError as exc:
        _print(err, exc)
        return 2
    store.set_runtime_config(name, text)
    _print(out, f"{name} = {text}")
    return 0


def command(args: argparse.Namespace) -> int:
    """`config get [KEY]` or `config set KEY VALUE`."""
    settings = common.settings()
    store = common.open_store(settings)
    try:
        if args.config_command == "get":
            return run_config_get(store, settings, args.key, sys.stdout, err=sys.stderr)
        return run_config_set(
            store, settings, args.key, args.value, sys.stdout, err=sys.stderr, now=time.time()
        )
    finally:
        store.close()
