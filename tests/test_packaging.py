"""Package metadata: the version written once, an SPDX license, project URLs."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import picortex

ROOT = Path(__file__).resolve().parent.parent
VERSION_LINE = re.compile(r"""^(__version__|version)\s*=\s*["']\d""", re.MULTILINE)


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def test_the_version_is_written_once_and_installed_as_such() -> None:
    project = _project()
    assert "version" not in project
    assert project["dynamic"] == ["version"]
    assert importlib.metadata.version("picortex") == picortex.__version__
    sources = [
        path
        for path in [*ROOT.glob("picortex/**/*.py"), ROOT / "pyproject.toml"]
        if VERSION_LINE.search(path.read_text(encoding="utf-8"))
    ]
    assert sources == [ROOT / "picortex" / "__init__.py"]


def test_the_license_is_an_spdx_expression_with_its_file() -> None:
    project = _project()
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    assert importlib.metadata.metadata("picortex")["License-Expression"] == "MIT"


def test_project_urls_name_the_same_home_as_the_user_agent() -> None:
    urls = _project()["urls"]
    assert isinstance(urls, dict)
    assert urls["Source"] == picortex.PROJECT_URL
    assert set(urls) >= {"Homepage", "Source", "Issues", "Changelog"}
