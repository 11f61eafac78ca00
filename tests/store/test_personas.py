"""Persona files on disk: agents.yaml and profiles read, and reread only when changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from picortex.errors import ConfigError
from picortex.store.personas import PersonaLoader, load_personas
from tests.core.test_personas import AGENTS


def write_home(home: Path) -> None:
    (home / "personas").mkdir(parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(AGENTS, encoding="utf-8")
    (home / "personas" / "sleep.md").write_text("Arnold's profile\n", encoding="utf-8")


def test_load_personas_from_home(tmp_path: Path) -> None:
    assert len(load_personas(tmp_path)) == 0
    write_home(tmp_path)
    ps = load_personas(tmp_path)
    sleep = ps.get("sleep")
    assert sleep is not None
    assert sleep.profile == "Arnold's profile"
    assert ps.source == str(tmp_path / "agents.yaml")


def test_load_personas_reports_bad_files(tmp_path: Path) -> None:
    write_home(tmp_path)
    (tmp_path / "personas" / "sleep.md").write_bytes(b"\xff\xfe bad")
    with pytest.raises(ConfigError, match=r"sleep\.md: is not UTF-8 text"):
        load_personas(tmp_path)
    (tmp_path / "agents.yaml").write_text("personas:\n  - id: x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r'agents\.yaml: persona #1 \("x"\) has no name'):
        load_personas(tmp_path)


def bump(path: Path, text: str) -> None:
    old = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(old + 10**9, old + 10**9))


def test_loader_reloads_only_on_change_and_keeps_the_last_good_set(tmp_path: Path) -> None:
    write_home(tmp_path)
    loader = PersonaLoader(tmp_path)
    assert loader.load().ids == ("sleep", "fitness")
    assert loader.reload_if_changed() is None

    bump(tmp_path / "personas" / "sleep.md", "New profile")
    reloaded = loader.reload_if_changed()
    assert reloaded is not None
    sleep = reloaded.get("sleep")
    assert sleep is not None
    assert sleep.profile == "New profile"

    bump(tmp_path / "agents.yaml", "personas: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        loader.reload_if_changed()
    assert loader.current.ids == ("sleep", "fitness")
    assert loader.reload_if_changed() is None  # the same bad edit is reported once

    bump(tmp_path / "agents.yaml", AGENTS.split("  - id: fitness")[0])
    fixed = loader.reload_if_changed()
    assert fixed is not None
    assert fixed.ids == ("sleep",)

    (tmp_path / "personas" / "fitness.md").write_text("Bea", encoding="utf-8")
    assert loader.reload_if_changed() is not None  # a new profile file is a change
