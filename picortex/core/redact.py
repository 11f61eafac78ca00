"""Redaction of secrets: Discord token shapes, `mfa.` tokens, interaction tokens, `sk-ant-` keys
(any case) and the configured token and key values exactly (also URL-encoded) become `[redacted]`.

Works on text, on nested values, and on JSON text (keeping it valid JSON). The configured
values are the one piece of state: `remember_secrets` registers them once per process, so
that every writer (the action log, error rows, stdlib logging of any library's traceback)
redacts them without each call site having to carry them.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterable
from typing import Final, TypeVar, cast
from urllib.parse import parse_qs, quote, quote_plus, unquote, urlsplit

import orjson

_T = TypeVar("_T")

REDACTED: Final = "[redacted]"

# The base64url alphabet Discord tokens, `mfa.` tokens and Anthropic keys are made of.
_C: Final = r"A-Za-z0-9_\-"

# Every match runs on over any further `.segment`s, so text glued to a secret (another
# token, a `mfa.` prefix, a dotted name) can never make a match stop short of its secret part.
_TAIL: Final = rf"(?:\.[{_C}]+)*"
# A Discord token: base64 of the user id, `.`, a timestamp, `.`, an HMAC; newer tokens have a
# longer last part, so the lengths are lower bounds only. The look-behind only makes the
# search start at the beginning of a run (speed).
_DISCORD: Final = rf"(?<![{_C}])[{_C}]{{20,}}\.[{_C}]{{6,}}\.[{_C}]{{27,}}{_TAIL}"
_MFA: Final = rf"mfa\.[{_C}]{{20,}}{_TAIL}"
_ANTHROPIC: Final = rf"(?i:sk-ant-)[{_C}]+{_TAIL}"
# An interaction token: base64url of `interaction:<id>:<secret>`, so it starts the same way.
_INTERACTION_START: Final = "aW50ZXJhY3Rpb24"
_INTERACTION: Final = rf"{_INTERACTION_START}[{_C}]{{16,}}{_TAIL}"

_SECRET_TEXT: Final = re.compile(f"{_DISCORD}|{_MFA}|{_ANTHROPIC}|{_INTERACTION}")
_SECRET_BYTES: Final = re.compile(f"{_DISCORD}|{_MFA}|{_ANTHROPIC}|{_INTERACTION}".encode())

# Cheap necessary conditions, checked before the full pattern, since most text holds no
# secret. Patterns that start with a literal scan at C speed, the faster the rarer the
# literal: a `.` then either the dotted middle of a Discord token or the start of a `mfa.`
# token; and `k-ant-` (the `s` is checked by the full pattern; `k` is rare in text).
_HINT: Final = rf"\.(?:[{_C}]{{6,}}\.|(?<=mfa\.)[{_C}])"
_HINT_TEXT: Final = re.compile(_HINT)
_HINT_BYTES: Final = re.compile(_HINT.encode())
_KEY_TEXT: Final = re.compile(f"(?i:k-ant-)|{_INTERACTION_START}")
_KEY_BYTES: Final = re.compile(f"(?i:k-ant-)|{_INTERACTION_START}".encode())
# A configured value shorter than this is not taken as a secret to hunt for: replacing a
# few common characters everywhere would garble every line, and no real token is so short.
SECRET_MIN_CHARS: Final = 8

_REDACTED_BYTES: Final = REDACTED.encode()
_BACKSLASH: Final = ord("\\")
_NEWLINE: Final = b"\n"


class _Known:
    """The configured secret values in every form they may be written in, longest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: frozenset[str] = frozenset()
        self.text: tuple[str, ...] = ()
        self.data: tuple[bytes, ...] = ()
        self.data_pattern: re.Pattern[bytes] | None = None

    def add(self, values: Iterable[str | None]) -> None:
        with self._lock:
            fresh = {v for v in values if v and len(v) >= SECRET_MIN_CHARS} - self.values
            if not fresh:
                return
            self.values = self.values | fresh
            forms: set[str] = set()
            for value in self.values:
                for encoded in (value, quote(value, safe=""), quote_plus(value, safe="")):
                    # Percent-escapes may be written in either case (`%2F` or `%2f`).
                    forms.update({encoded, _lower_escapes(encoded)})
            ordered = sorted(forms, key=len, reverse=True)
            json_forms = {orjson.dumps(form)[1:-1] for form in ordered}
            self.text = tuple(ordered)
            self.data = tuple(sorted(json_forms, key=len, reverse=True))
            self.data_pattern = re.compile(b"|".join(re.escape(form) for form in self.data))


_PERCENT_ESCAPE: Final = re.compile(r"%[0-9A-F]{2}")


def _lower_escapes(text: str) -> str:
    return _PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), text)


_known = _Known()


def remember_secrets(*values: str | None) -> None:
    """Redact these exact values (the configured Discord token and API key) from now on.

    Whatever their shape: a gateway's key need not start with `sk-ant-`. Their URL-encoded
    forms are redacted too. Empty and very short values are ignored.
    """
    _known.add(values)


# `password=...` in a key/value connection string (`host=db password='it\'s'`), quoted or not.
_DSN_PASSWORD: Final = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)")


def url_secrets(url: str | None) -> tuple[str, ...]:
    """What of a database URL is secret: the whole URL and its password (SPEC 17), also as
    `user:password` (a short password is caught there) and in a key/value connection string.
    """
    if not url:
        return ()
    secrets = [url]
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        if parts.password:
            secrets += [parts.password, unquote(parts.password)]
            secrets.append(parts.netloc.rpartition("@")[0])  # user:password
        secrets += parse_qs(parts.query).get("password", [])
    for match in _DSN_PASSWORD.finditer(url):
        value = match.group(1)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        secrets.append(value)
    return tuple(secrets)


def _without_known(text: str) -> str:
    for form in _known.text:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def redact(text: str) -> str:
    """Return `text` with every secret shape and configured secret replaced by `[redacted]`."""
    if _known.text:
        text = _without_known(text)
    if _HINT_TEXT.search(text) is not None or _KEY_TEXT.search(text) is not None:
        return _SECRET_TEXT.sub(REDACTED, text)
    return text


def redact_obj(obj: _T) -> _T:
    """Redact every string inside `obj` (dict keys and values, lists, tuples); keep the rest."""
    return cast(_T, _redact_value(obj))


def _redact_value(obj: object) -> object:
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {_redact_value(k): _redact_value(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_value(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact_value(v) for v in obj)
    return obj


def redact_json_bytes(data: bytes) -> bytes:
    """Redact secrets in JSON text (one document or many lines); the result stays valid JSON.

    Only lines that may hold a secret are searched with the full pattern, so a batch of
    ordinary log lines costs two fast scans.
    """
    pattern = _known.data_pattern
    if pattern is not None and any(form in data for form in _known.data):
        data = pattern.sub(_replace_in_json, data)
    if _HINT_BYTES.search(data) is None and _KEY_BYTES.search(data) is None:
        return data
    out: list[bytes] = []
    pos = 0
    for start in _candidate_lines(data):
        if start < pos:
            continue
        end = data.find(_NEWLINE, start)
        if end < 0:
            end = len(data)
        out.append(data[pos:start])
        out.append(_SECRET_BYTES.sub(_replace_in_json, data[start:end]))
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def _candidate_lines(data: bytes) -> list[int]:
    """Start offsets of the lines that contain a necessary condition for a secret."""
    hits: set[int] = set()
    for pattern in (_HINT_BYTES, _KEY_BYTES):
        for m in pattern.finditer(data):
            hits.add(data.rfind(_NEWLINE, 0, m.start()) + 1)
    return sorted(hits)


def _replace_in_json(m: re.Match[bytes]) -> bytes:
    # A match may begin on the letter of a JSON escape (`\n`, `\u001b`): keep the escape
    # whole so the line stays valid JSON. An odd run of backslashes means a real escape.
    start = m.start()
    text = m.string
    slashes = 0
    while start - slashes - 1 >= 0 and text[start - slashes - 1] == _BACKSLASH:
        slashes += 1
    if slashes % 2:
        keep = 5 if text[start : start + 1] == b"u" else 1
        return bytes(text[start : start + keep]) + _REDACTED_BYTES
    return _REDACTED_BYTES
