"""Every exception picortex defines sits in the tree drawn in picortex.errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import picortex
from picortex import errors
from picortex.errors import PicortexError, is_fatal


def _defined_exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(picortex.__path__, "picortex."):
        if info.name.endswith("__main__"):
            continue  # __main__ runs the CLI
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == info.name:
                found.append(value)
    return found


def test_every_exception_class_in_the_package_derives_from_picortex_error() -> None:
    defined = _defined_exceptions()
    assert errors.ApiError in defined
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, PicortexError)
    ]
    assert outside == []


def test_every_public_error_is_drawn_in_the_module_docstring() -> None:
    doc = errors.__doc__ or ""
    public = [
        c
        for c in _defined_exceptions()
        if not c.__name__.startswith("_") and c is not PicortexError
    ]
    missing = [c.__name__ for c in public if f"+-- {c.__name__} " not in doc]
    assert "PicortexError" in doc
    assert missing == []


def test_the_class_says_fatal_or_retryable() -> None:
    assert is_fatal(errors.ConfigError("bad key"))
    assert is_fatal(errors.FatalDiscordError("401", close_code=None))
    assert is_fatal(errors.HomeLocked("held", pid=1))
    assert not is_fatal(errors.DiscordHTTPError(500, None, "oops"))
    assert not is_fatal(errors.StoreError("locked"))
    assert not is_fatal(errors.SupervisorExhausted("gave up"))
    assert not is_fatal(ValueError("not ours"))
    assert errors.FatalDiscordError.exit_code == 3
    assert errors.SupervisorExhausted.exit_code == 70
    assert errors.ConfigError.exit_code == 2


def test_a_corrupt_cache_file_is_still_a_value_error() -> None:
    assert issubclass(errors.CorruptCacheFile, ValueError)
