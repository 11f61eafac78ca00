"""The suite's bytecode sharing: the caches it may remove, and the workers' slices."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tests import bytecode


def test_only_the_checkouts_caches_are_found(tmp_path: Path) -> None:
    for folder in ("pkg/__pycache__", "pkg/sub/__pycache__", ".git/x/__pycache__"):
        (tmp_path / folder).mkdir(parents=True)
    venv = tmp_path / "env"
    (venv / "lib/__pycache__").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    assert bytecode._caches(tmp_path) == {
        tmp_path / "pkg/__pycache__",
        tmp_path / "pkg/sub/__pycache__",
    }


def test_the_end_of_a_run_removes_the_caches_it_made_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "pkg/__pycache__"
    kept.mkdir(parents=True)
    config = types.SimpleNamespace(stash=pytest.Stash())
    config.stash[bytecode._BEFORE] = (tmp_path, bytecode._caches(tmp_path))
    monkeypatch.setenv(bytecode.WRITE_FOR_THE_RUN, "1")
    made = tmp_path / "pkg/sub/__pycache__"
    made.mkdir(parents=True)
    (made / "mod.cpython-311.pyc").write_bytes(b"")
    bytecode.pytest_unconfigure(config)  # type: ignore[arg-type]
    assert kept.is_dir()
    assert not made.exists()


def test_the_slices_cover_every_module_once() -> None:
    paths = [Path(f"m{n}.py") for n in range(10)]
    slices = [bytecode._slice(paths, index, 3) for index in range(3)]
    assert sorted(p for part in slices for p in part) == sorted(paths)
    assert [len(part) for part in slices] == [3, 3, 4]
