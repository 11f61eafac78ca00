"""Panel login (SPEC 13): the token file, sessions, CSRF tokens and one-time login links.

The token in `PICORTEX_HOME/web.token` is the owner's key to the panel. A browser trades it
(or a one-time link signed with it) for a session cookie; scripts send it as a bearer token.
Sessions live in the bot's memory: a restart asks for a new login. Used one-time codes are
kept in `web.used_codes` until they expire, so a restart does not make a used link work again.
A second token, `web.metrics_token`, only reads /metrics: a scraper need not hold the owner's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Final

import attrs
import orjson

from picortex.errors import ConfigError

logger = logging.getLogger(__name__)

TOKEN_FILE: Final = "web.token"  # noqa: S105 - a file name, not a secret
METRICS_TOKEN_FILE: Final = "web.metrics_token"  # noqa: S105 - a file name, not a secret
USED_CODES_FILE: Final = "web.used_codes"
# 32 random bytes: far beyond guessing, short enough to paste.
TOKEN_BYTES: Final = 32
SESSION_COOKIE: Final = "picortex_session"
LOGIN_COOKIE: Final = "picortex_login"
# A session ends after this long; the owner logs in again (the token never expires).
SESSION_SECONDS: Final = 7 * 24 * 3600.0
# A login link printed by `picortex web` works once, within this long.
LINK_SECONDS: Final = 600.0
# Sessions kept at most; the oldest go first (each login makes one).
MAX_SESSIONS: Final = 256


def token_path(home: Path) -> Path:
    """Where the panel's token is kept."""
    return home / TOKEN_FILE


def metrics_token_path(home: Path) -> Path:
    """Where the read-only /metrics token is kept."""
    return home / METRICS_TOKEN_FILE


def load_or_create_token(home: Path) -> str:
    """The panel's token, made (0600) on first use.

    Raises:
        ConfigError: the home or the token file cannot be written or read.
    """
    return _load_or_create_secret(home, token_path(home), "the panel token")


def load_or_create_metrics_token(home: Path) -> str:
    """The token that reads /metrics and nothing else, made (0600) on first use.

    Raises:
        ConfigError: the home or the token file cannot be written or read.
    """
    return _load_or_create_secret(home, metrics_token_path(home), "the metrics token")


def _load_or_create_secret(home: Path, path: Path, what: str) -> str:
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode())
            finally:
                os.close(fd)
        _make_private(path)
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {what} cannot be made or read ({exc})") from None
    if len(text) < TOKEN_BYTES:
        raise ConfigError(f"{path}: {what} is too short; delete the file to make one")
    return text


def _make_private(path: Path) -> None:
    """A token file others can read or write is narrowed to 0600 (and the owner told)."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, 0o600)
        logger.warning("%s was mode %03o; it is now 0600 (owner only)", path, mode)


def same_secret(given: str, expected: str) -> bool:
    """Compare secrets in constant time."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _link_mac(token: str, nonce: str, expires: int) -> str:
    message = f"login-link:{nonce}:{expires}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()[:32]


def make_login_code(token: str, now: float) -> str:
    """A one-time login code: a nonce, its expiry, and a MAC keyed with the token."""
    nonce = secrets.token_urlsafe(12)
    expires = int(now + LINK_SECONDS)
    return f"{nonce}.{expires}.{_link_mac(token, nonce, expires)}"


def login_link(base_url: str, token: str, now: float) -> str:
    """The link `picortex web` prints."""
    return f"{base_url.rstrip('/')}/login?once={make_login_code(token, now)}"


@attrs.define
class Session:
    """One logged-in browser."""

    id: str
    csrf: str
    expires: float
    # Notes shown once on the next page ("Saved the prompt"): (ok, text).
    flash: list[tuple[bool, str]] = attrs.field(factory=list)


@attrs.define
class Sessions:
    """The panel's sessions (in memory) and used one-time codes (kept in `used_path`)."""

    token: str
    used_path: Path | None = None
    by_id: dict[str, Session] = attrs.field(factory=dict)
    used_codes: dict[str, float] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.used_path is not None:
            self.used_codes = read_used_codes(self.used_path)

    @staticmethod
    def new_nonce() -> str:
        """A random value for the login form's CSRF check."""
        return secrets.token_urlsafe(16)

    def create(self, now: float) -> Session:
        """A new session (the oldest is dropped past MAX_SESSIONS)."""
        self._expire(now)
        while len(self.by_id) >= MAX_SESSIONS:
            del self.by_id[next(iter(self.by_id))]
        session = Session(
            secrets.token_urlsafe(TOKEN_BYTES), secrets.token_urlsafe(16), now + SESSION_SECONDS
        )
        self.by_id[session.id] = session
        return session

    def get(self, session_id: str | None, now: float) -> Session | None:
        """The live session with this id, or None."""
        if not session_id:
            return None
        session = self.by_id.get(session_id)
        if session is None or session.expires <= now:
            return None
        return session

    def end(self, session_id: str | None) -> None:
        """Log a session out."""
        if session_id:
            self.by_id.pop(session_id, None)

    def check_token(self, given: str) -> bool:
        """True for the panel's token."""
        return bool(given) and same_secret(given.strip(), self.token)

    def use_code(self, code: str, now: float) -> bool:
        """True (once) for a valid, unexpired one-time code."""
        parts = code.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return False
        nonce, expires_text, mac = parts
        expires = int(expires_text)
        if expires <= now or expires > now + LINK_SECONDS + 60:
            return False
        if not same_secret(mac, _link_mac(self.token, nonce, expires)):
            return False
        self.used_codes = {n: t for n, t in self.used_codes.items() if t > now}
        if nonce in self.used_codes:
            return False
        self.used_codes[nonce] = float(expires)
        if self.used_path is not None:
            write_used_codes(self.used_path, self.used_codes)
        return True

    def _expire(self, now: float) -> None:
        self.by_id = {k: s for k, s in self.by_id.items() if s.expires > now}


def read_used_codes(path: Path) -> dict[str, float]:
    """Used one-time codes (nonce: expiry) from `path`; an unreadable file counts as none."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError) as exc:
        logger.warning("%s cannot be read (%s); used login links are forgotten", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(nonce): float(expires)
        for nonce, expires in data.items()
        if isinstance(expires, int | float) and not isinstance(expires, bool)
    }


def write_used_codes(path: Path, used: dict[str, float]) -> None:
    """Keep the used codes (0600, replaced whole); a failure is a warning, never a crash."""
    partial = path.with_name(path.name + ".partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, orjson.dumps(used))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
    except OSError as exc:
        logger.warning("%s cannot be written (%s); a restart forgets used login links", path, exc)
