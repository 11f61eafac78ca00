"""`picortex cluster status` (SPEC 17): each process's heartbeat, each shard's holder and
saved session; the database URL never printed."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson
import pytest
import trio

from picortex.cli import main
from picortex.store import StoreActor
from picortex.store.backends import connect_postgres
from picortex.store.pg.cluster import LIVE_SECONDS, ClusterNode, node_name
from picortex.store.pg.leases import ShardLeases

NOW = 2_000_000_000.0


@pytest.fixture
def cluster_env(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.setenv("PICORTEX_DATABASE_URL", pg_url)
    monkeypatch.setattr("picortex.cli.cluster.time.time", lambda: NOW)
    db = connect_postgres(pg_url)
    try:
        db.note_node(ClusterNode("alpha:11", "alpha", 11, "0,2/4", NOW - 600, NOW - 2))
        db.note_node(ClusterNode("beta:22", "beta", 22, "1/4", NOW - 900, NOW - LIVE_SECONDS - 1))
        db.save_gateway_session((0, 4), "sess-zero", "wss://resume.example", 41, NOW - 3)
        db.save_gateway_session((1, 4), "sess-one", "wss://resume.example", 7, NOW - 300)
    finally:
        db.close()
    return pg_url


def test_cluster_status_lists_processes_and_each_shards_holder(
    cluster_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert cluster_env not in out
    assert lines[0].startswith("PostgreSQL ")
    alpha = next(line for line in lines if "alpha:11" in line and "running" in line)
    assert "0,2/4" in alpha and "2 s ago" in alpha
    assert any("beta:22" in line and "gone" in line for line in lines)
    shard_rows = {line.split()[0]: line.split() for line in lines[lines.index("shards:") + 1 :]}
    assert shard_rows["0"][:6] == ["0", "alpha:11", "-", "-", "sess-zero", "41"]
    assert shard_rows["1"][:6] == ["1", "none", "-", "-", "sess-one", "7"]  # its holder is gone
    assert shard_rows["2"][:6] == ["2", "alpha:11", "-", "-", "-", "-"]  # held, nothing saved


def test_cluster_status_as_json(cluster_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "status", "--json"]) == 0
    out = capsys.readouterr().out
    assert cluster_env not in out
    data = orjson.loads(out)
    assert [(n["node"], n["shards"], n["live"]) for n in data["nodes"]] == [
        ("alpha:11", "0,2/4", True),
        ("beta:22", "1/4", False),
    ]
    assert [(s["shard"], s["holder"], s["session_id"], s["seq"]) for s in data["shards"]] == [
        (0, "alpha:11", "sess-zero", 41),
        (1, None, "sess-one", 7),
        (2, "alpha:11", None, None),
    ]
    assert data["nodes"][0]["last_seen"] == NOW - 2


@pytest.mark.parametrize("as_json", [False, True])
def test_cluster_status_without_a_database_url_says_so_in_one_sentence(
    as_json: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.delenv("PICORTEX_DATABASE_URL", raising=False)
    assert main(["cluster", "status", *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    if as_json:
        assert orjson.loads(out) == {
            "cluster": False,
            "message": "no cluster: PICORTEX_DATABASE_URL is not set",
        }
    else:
        assert out == "no cluster: PICORTEX_DATABASE_URL is not set\n"


def test_cluster_status_shows_each_shards_lease_holder_epoch_and_end(
    cluster_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = connect_postgres(cluster_env)
    try:
        with ShardLeases.beside(db) as leases:
            assert leases.take((3, 4), "gamma:33", 30.0) == 1
            assert leases.take((1, 4), "alpha:11", 30.0) == 1
            assert leases.release([1], "alpha:11") == 1
            assert leases.take((1, 4), "gamma:33", 30.0) == 2  # a second holding
            assert leases.take((2, 4), "alpha:11", 30.0) == 1
            assert leases.release([2], "alpha:11") == 1  # handed back, nobody took it
    finally:
        db.close()
    assert main(["cluster", "status", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    shards = {s["shard"]: s for s in data["shards"]}
    assert (shards[3]["holder"], shards[3]["epoch"]) == ("gamma:33", 1)
    assert 25 < shards[3]["lease_ends_in"] <= 30
    assert shards[3]["expires_at"] > 0
    # The lease decides over the heartbeats: shard 1 is gamma's, shard 2 nobody's.
    assert (shards[1]["holder"], shards[1]["epoch"], shards[1]["session_id"]) == (
        "gamma:33",
        2,
        "sess-one",
    )
    assert shards[2]["holder"] is None and shards[2]["lease_ends_in"] <= 0
    assert (shards[0]["holder"], shards[0]["epoch"]) == ("alpha:11", None)  # no lease row
    assert main(["cluster", "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[lines.index("shards:") + 1 :]}
    assert rows["3"].split()[:3] == ["3", "gamma:33", "1"] and "ends in" in rows["3"]
    assert rows["2"].split()[:4] == ["2", "none", "1", "free"]


async def test_a_running_store_tells_its_heartbeat_and_shards(pg_url: str) -> None:
    store = StoreActor(connect_postgres(pg_url))
    store.shards = ((2, 8), (5, 8))
    reader = connect_postgres(pg_url)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            with trio.fail_after(20):
                while not reader.cluster_nodes():
                    await store.flush()
            nursery.cancel_scope.cancel()
        [node] = reader.cluster_nodes()
    finally:
        store.close()
        reader.close()
    assert (node.node, node.host, node.pid) == (node_name(), socket.gethostname(), os.getpid())
    assert node.shards == "2,5/8"
    assert node.shard_ids() == [2, 5]
    assert node.last_seen >= node.started_at
