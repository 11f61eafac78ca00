"""Persona files on disk: `agents.yaml` and `personas/<id>.md` read, and reread when changed.

The parsing and every rule about what the files mean is pure, in `picortex.core.personas`.
"""

from __future__ import annotations

import math
from pathlib import Path

from picortex.core.personas import AGENTS_FILE, PROFILES_DIR, PersonaSet, parse_agents
from picortex.errors import ConfigError


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def load_personas(home: Path) -> PersonaSet:
    """Read `home/agents.yaml` and the profiles of its personas (no file: no personas).

    Raises:
        ConfigError: a file cannot be read or is not valid.
    """
    path = home / AGENTS_FILE
    if not path.exists():
        return PersonaSet((), str(path))
    text = _read_text(path)
    ids = parse_agents(text, str(path), {}).ids
    profiles = {}
    for ident in ids:
        profile = home / PROFILES_DIR / f"{ident}.md"
        if profile.is_file():
            profiles[ident] = _read_text(profile)
    return parse_agents(text, str(path), profiles)


class PersonaLoader:
    """Holds the personas and reloads them when `agents.yaml` or a profile changes."""

    def __init__(self, home: Path) -> None:
        self._home = home
        self._stamp: tuple[tuple[str, int, int], ...] | None = None
        self._current = PersonaSet((), str(home / AGENTS_FILE))
        self._looked_at = -math.inf

    @property
    def looked_at(self) -> float:
        """When `reload_if_changed` last looked at the files, on its caller's clock."""
        return self._looked_at

    @property
    def current(self) -> PersonaSet:
        """The last set that loaded without error."""
        return self._current

    def _snapshot(self) -> tuple[tuple[str, int, int], ...]:
        paths = [self._home / AGENTS_FILE]
        profiles = self._home / PROFILES_DIR
        if profiles.is_dir():
            paths.extend(sorted(profiles.glob("*.md")))
        stamp = []
        for path in paths:
            try:
                st = path.stat()
            except OSError:
                continue
            stamp.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def load(self) -> PersonaSet:
        """Read the files now.

        Raises:
            ConfigError: the files are not valid; the previous set stays current.
        """
        # Stamp before reading: an edit made while we read is seen by the next check.
        self._stamp = self._snapshot()
        self._current = load_personas(self._home)
        return self._current

    def reload_if_changed(self, now: float | None = None) -> PersonaSet | None:
        """The new set when a file changed since the last load, else None.

        `now` (the caller's clock) is kept as `looked_at`, for callers that look at most so
        often.

        Raises:
            ConfigError: the changed files are not valid; the previous set stays current and
                the same bad edit is not reported again.
        """
        if now is not None:
            self._looked_at = now
        if self._snapshot() == self._stamp:
            return None
        return self.load()
