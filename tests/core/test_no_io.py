"""`picortex.core` makes decisions only: no files, clock, sockets, database or trio in it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import picortex.core

CORE = Path(picortex.core.__file__).parent
# Modules whose use means I/O, a clock, randomness or an event loop.
FORBIDDEN_MODULES = frozenset(
    {
        "anthropic",
        "apsw",
        "asyncio",
        "httpx",
        "io",
        "logging",
        "os",
        "pathlib",
        "random",
        "shutil",
        "socket",
        "sqlite3",
        "subprocess",
        "tempfile",
        "time",
        "trio",
        "picortex.actors",
        "picortex.app",
        "picortex.config",
        "picortex.files",
        "picortex.store",
        "picortex.web",
    }
)
# Calls that read the world: the clock and files.
FORBIDDEN_CALLS = frozenset({"open", "now", "utcnow", "today", "monotonic", "perf_counter"})


def _imported(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _called(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.append(func.id)
            elif isinstance(func, ast.Attribute):
                names.append(func.attr)
    return names


def _banned(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in FORBIDDEN_MODULES)


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_a_core_module_does_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert [m for m in _imported(tree) if _banned(m)] == []
    assert [c for c in _called(tree) if c in FORBIDDEN_CALLS] == []


def test_the_check_catches_io() -> None:
    tree = ast.parse("import trio\nfrom os import path\nopen('x')\ndatetime.now()\n")
    assert [m for m in _imported(tree) if _banned(m)] == ["trio", "os"]
    assert [c for c in _called(tree) if c in FORBIDDEN_CALLS] == ["open", "now"]
