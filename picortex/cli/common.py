"""What several commands share: settings for acting or for reading, the home, the store."""

from __future__ import annotations

import sys
from pathlib import Path

from picortex.config import Settings, load_settings, load_settings_for_reading
from picortex.errors import ConfigError
from picortex.store import AdminStore
from picortex.store.backends import open_admin


def settings() -> Settings:
    """The full settings: a broken picortex.toml stops the command with its sentence."""
    return load_settings()


def reading_settings() -> Settings:
    """Settings for `log`, `errors` and `status`: a broken picortex.toml is only a warning."""
    found, problem = load_settings_for_reading()
    if problem is not None:
        print(f"picortex: warning: {problem} (reading with the defaults)", file=sys.stderr)
    return found


def home(settings: Settings) -> Path:
    """PICORTEX_HOME, created 0700 if needed; one sentence when that is impossible."""
    from picortex.files import private_dir

    try:
        return private_dir(settings.home)
    except OSError as exc:
        raise ConfigError(
            f"PICORTEX_HOME {settings.home} cannot be created or used "
            f"({exc.strerror or exc}); set PICORTEX_HOME to a folder you can write"
        ) from None


def open_store(settings: Settings) -> AdminStore:
    """The home's database, the home created first if needed (every write committed at once)."""
    home(settings)
    return open_admin(settings)
