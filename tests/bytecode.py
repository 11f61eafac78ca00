"""Workers share the suite's bytecode: each module is compiled once, not once per worker.

To collect the suite every xdist worker imports every test module, and pytest rewrites the
asserts of each one: on two cores that was about 5 s of CPU per worker for the rewriting
alone, plus compiling the package. Here worker i first compiles the i-th slice of the
package's modules, then imports the test modules starting at its own slice and going round,
so a module is compiled once, by the worker whose slice it is, and the others (and the bots
the tests start) read its bytecode from `__pycache__`.

Where the environment forbids bytecode files (PYTHONDONTWRITEBYTECODE), the workers write
them all the same for the run, and at the end the controller removes every `__pycache__`
directory the run created: the tree is left as it was found.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import py_compile
import shutil
import sys
from pathlib import Path
from typing import Final

import pytest

# Set by the controller for its workers: write bytecode although the environment says not to.
WRITE_FOR_THE_RUN: Final = "PICORTEX_TESTS_SHARE_BYTECODE"
# What the workers compile: the package and the suite (third-party bytecode is installed).
PACKAGE: Final = "picortex"
SUITE: Final = "tests"

# The controller's note of the caches that were there before the run.
_BEFORE: Final = pytest.StashKey[tuple[Path, set[Path]]]()


def _caches(root: Path) -> set[Path]:
    """The `__pycache__` directories of the checkout (not of a virtualenv inside it)."""
    found: set[Path] = set()
    for top, dirs, _files in os.walk(root):
        if "__pycache__" in dirs:
            found.add(Path(top) / "__pycache__")
        dirs[:] = [
            d
            for d in dirs
            if d != "__pycache__"
            and not d.startswith(".")
            and not (Path(top) / d / "pyvenv.cfg").exists()
        ]
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    workers = getattr(config.option, "numprocesses", None)
    on_controller = not hasattr(config, "workerinput") and isinstance(workers, int)
    if on_controller and workers and workers > 1 and sys.dont_write_bytecode:
        root = config.rootpath
        config.stash[_BEFORE] = (root, _caches(root))
        os.environ[WRITE_FOR_THE_RUN] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    before = config.stash.get(_BEFORE, None)
    if before is None:
        return
    root, existing = before
    os.environ.pop(WRITE_FOR_THE_RUN, None)
    for cache in sorted(_caches(root) - existing):
        shutil.rmtree(cache, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return
    if os.environ.get(WRITE_FOR_THE_RUN):
        sys.dont_write_bytecode = False
    if sys.dont_write_bytecode:
        return
    index = int(worker[2:]) % count
    root = session.config.rootpath
    modules = sorted(_test_modules(session, root))
    if _whole_suite(session, root):
        # The whole suite imports nearly all of the package: compile this worker's share.
        package = sorted((root / PACKAGE).rglob("*.py"))
        for source in _slice(package, index, count):
            if not _fresh(source):
                with contextlib.suppress(py_compile.PyCompileError, OSError):
                    py_compile.compile(str(source), doraise=True)
    start = len(modules) * index // count
    for name in modules[start:] + modules[:start]:
        try:
            importlib.import_module(name)
        except KeyboardInterrupt:
            raise
        except BaseException:
            # Collection imports it again and reports whatever went wrong here (a module
            # that skips itself raises an outcome, not an Exception).
            continue


def _slice(paths: list[Path], index: int, count: int) -> list[Path]:
    return paths[len(paths) * index // count : len(paths) * (index + 1) // count]


def _fresh(source: Path) -> bool:
    """Whether the source's bytecode is there and no older than it."""
    if sys.implementation.cache_tag is None:  # an interpreter that caches no bytecode
        return False
    try:
        cached = Path(importlib.util.cache_from_source(str(source)))
        return cached.stat().st_mtime >= source.stat().st_mtime
    except OSError:
        return False


def _arg_paths(session: pytest.Session) -> list[Path]:
    here = Path(session.config.invocation_params.dir)
    return [(here / arg.split("::")[0]).resolve() for arg in session.config.args]


def _whole_suite(session: pytest.Session, root: Path) -> bool:
    return (root / SUITE).resolve() in _arg_paths(session)


def _test_modules(session: pytest.Session, root: Path) -> set[str]:
    """Dotted names of the test modules the run collects (`tests` is a package tree)."""
    if str(root) not in sys.path:
        return set()
    names: set[str] = set()
    for path in _arg_paths(session):
        files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        for file in files:
            with contextlib.suppress(ValueError):
                parts = file.relative_to(root).with_suffix("").parts
                if parts and parts[0] == SUITE and file.name.startswith("test_"):
                    names.add(".".join(parts))
    return names
