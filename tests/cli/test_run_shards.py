"""`picortex run --shards/--capacity/--shard` and `[cluster]`: which shards one process serves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from picortex import cli
from picortex.cli.run import held_shards, leased_shards
from picortex.config import ClusterSettings
from picortex.core.leases import Want
from picortex.core.shards import parse_shards

pytestmark = pytest.mark.usefixtures("root_logging_restored")


def _held(argv: list[str], cluster: ClusterSettings | None = None) -> list[tuple[int, int]]:
    args = cli.build_parser().parse_args(["run", *argv])
    return held_shards(args, cluster or ClusterSettings())


def test_default_is_the_one_shard_0_of_1() -> None:
    assert _held([]) == [(0, 1)]


def test_flags() -> None:
    assert _held(["--shards", "2/8"]) == [(2, 8)]
    assert _held(["--shards", "0-1,4/8"]) == [(0, 8), (1, 8), (4, 8)]
    assert _held(["--shard", "3/4"]) == [(3, 4)]
    # Without a shared database nobody else holds a shard: auto takes them all.
    assert _held(["--shards", "auto/4"]) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert _held(["--shards", "auto/4", "--capacity", "2"]) == [(0, 4), (1, 4)]


def test_flags_override_the_cluster_section() -> None:
    cluster = ClusterSettings(shards=parse_shards("auto/8"), capacity=3)
    assert _held([], cluster) == [(0, 8), (1, 8), (2, 8)]
    assert _held(["--capacity", "1"], cluster) == [(0, 8)]
    assert _held(["--shards", "5/6"], cluster) == [(5, 6)]
    assert _held(["--shard", "5/6"], cluster) == [(5, 6)]


def _leased(argv: list[str], cluster: ClusterSettings | None = None) -> Want:
    args = cli.build_parser().parse_args(["run", *argv])
    return leased_shards(args, cluster or ClusterSettings())


def test_with_a_shared_database_shards_are_wanted_by_lease_up_to_capacity() -> None:
    # Capacity defaults to the count named: auto/8 may take every shard.
    assert _leased(["--shards", "auto/8"]) == Want(ids=(), count=8, capacity=8, auto=True)
    assert _leased(["--shards", "auto/8", "--capacity", "4"]) == Want((), 8, 4, auto=True)
    assert _leased(["--shards", "0-2,5/8"]) == Want(ids=(0, 1, 2, 5), count=8, capacity=4)
    assert _leased(["--shard", "3/4"]) == Want(ids=(3,), count=4, capacity=1)
    assert _leased([]) == Want(ids=(0,), count=1, capacity=1)
    cluster = ClusterSettings(shards=parse_shards("auto/16"), capacity=3)
    assert _leased([], cluster) == Want(ids=(), count=16, capacity=3, auto=True)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("PICORTEX_", "DISCORD_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "tok")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (
            ["--shards", "0-3/2"],
            "picortex: argument --shards: --shards '0-3/2': shard 3 is out of range "
            "(ids go from 0 to 1) (see `picortex --help`)\n",
        ),
        (["--shards", "1/2", "--shard", "1/2"], "picortex: give --shards or --shard, not both\n"),
        (
            ["--capacity", "0"],
            "picortex: argument --capacity: must be at least 1, got 0 (see `picortex --help`)\n",
        ),
    ],
)
def test_bad_flags_are_one_sentence_and_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], sentence: str
) -> None:
    with pytest.raises(SystemExit) as info:
        code = cli.main(["run", *argv])
        raise SystemExit(code)
    assert info.value.code == 2
    assert capsys.readouterr().err == sentence
