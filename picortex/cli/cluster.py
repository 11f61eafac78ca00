"""`picortex cluster init|status`: the shared PostgreSQL's schema, its processes and shards
(SPEC 17)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from picortex.cli import common
from picortex.cli.errors import _dump, _table
from picortex.errors import ConfigError
from picortex.store.backends import connect_postgres
from picortex.store.pg.schema import LATEST_VERSION

if TYPE_CHECKING:
    from picortex.store.pg.database import PgDatabase

NO_CLUSTER = "no cluster: PICORTEX_DATABASE_URL is not set"


def command(args: argparse.Namespace) -> int:
    """Run `cluster init` or `cluster status`."""
    settings = common.settings()
    if args.cluster_command == "status" and not settings.database_url:
        if args.json:
            _dump({"cluster": False, "message": NO_CLUSTER}, sys.stdout)
        else:
            print(NO_CLUSTER)
        return 0
    if not settings.database_url:
        raise ConfigError(
            "picortex cluster needs PICORTEX_DATABASE_URL (postgresql://...); "
            "without it picortex uses the home's SQLite file and there is nothing to set up"
        )
    db = connect_postgres(settings.database_url)  # creates or migrates the schema
    try:
        if args.cluster_command == "status":
            return run_status(db, as_json=args.json, out=sys.stdout, now=time.time())
        version = db.schema_version()
        where = db.path
    finally:
        db.close()
    print(f"{where}: schema version {version} (this picortex's latest: {LATEST_VERSION})")
    return 0


def status(db: PgDatabase, now: float) -> dict[str, Any]:
    """The processes (newest heartbeat first) and each shard's holder (by its lease, else
    by the heartbeats), lease epoch and end, and saved session."""
    from picortex.store.pg.leases import ShardLeases

    nodes = db.cluster_nodes()
    holders: dict[int, str] = {}
    for node in sorted(nodes, key=lambda n: n.last_seen):
        if node.live(now):
            for shard_id in node.shard_ids():
                holders[shard_id] = node.node  # the newest heartbeat wins
    with ShardLeases.beside(db) as table:
        db_now, leases = table.leases()
    for shard_id, lease in leases.items():
        # The lease says who holds it, on the database's clock.
        if lease.live(db_now) and lease.node is not None:
            holders[shard_id] = lease.node
        else:
            holders.pop(shard_id, None)
    sessions = {s.shard_id: s for s in db.gateway_sessions()}
    shard_ids = sorted(set(holders) | set(sessions) | set(leases))
    return {
        "cluster": True,
        "database": db.path,
        "schema_version": db.schema_version(),
        "nodes": [
            {
                "node": n.node,
                "host": n.host,
                "pid": n.pid,
                "shards": n.shards,
                "started_at": n.started_at,
                "last_seen": n.last_seen,
                "live": n.live(now),
            }
            for n in sorted(nodes, key=lambda n: n.last_seen, reverse=True)
        ],
        "shards": [
            {
                "shard": shard_id,
                "holder": holders.get(shard_id),
                "epoch": leases[shard_id].epoch if shard_id in leases else None,
                # Seconds from now (the database's clock) until the lease ends; < 0: lapsed.
                "lease_ends_in": (
                    round(leases[shard_id].expires_at - db_now, 1) if shard_id in leases else None
                ),
                "expires_at": leases[shard_id].expires_at if shard_id in leases else None,
                "session_id": sessions[shard_id].session_id if shard_id in sessions else None,
                "seq": sessions[shard_id].seq if shard_id in sessions else None,
                "saved_at": sessions[shard_id].updated_at if shard_id in sessions else None,
            }
            for shard_id in shard_ids
        ],
    }


def run_status(db: PgDatabase, *, as_json: bool, out: TextIO, now: float) -> int:
    """Print the cluster's processes and shards, as a table or JSON."""
    data = status(db, now)
    if as_json:
        _dump(data, out)
        return 0
    out.write(f"{data['database']} (schema version {data['schema_version']})\n")
    if not data["nodes"]:
        out.write("no process has told its heartbeat yet\n")
    else:
        out.write("processes:\n")
        _table(
            ("  node", "host", "pid", "shards", "last renewal", "state"),
            [
                (
                    f"  {n['node']}",
                    n["host"],
                    str(n["pid"]),
                    n["shards"] or "-",
                    _ago(now - n["last_seen"]),
                    "running" if n["live"] else "gone",
                )
                for n in data["nodes"]
            ],
            out,
        )
    if data["shards"]:
        out.write("shards:\n")
        _table(
            ("  shard", "holder", "epoch", "lease", "session", "seq", "saved"),
            [
                (
                    f"  {s['shard']}",
                    s["holder"] or "none",
                    "-" if s["epoch"] is None else str(s["epoch"]),
                    _lease(s["lease_ends_in"]),
                    s["session_id"] or "-",
                    "-" if s["seq"] is None else str(s["seq"]),
                    "-" if s["saved_at"] is None else _ago(now - s["saved_at"]),
                )
                for s in data["shards"]
            ],
            out,
        )
    return 0


def _lease(ends_in: float | None) -> str:
    if ends_in is None:
        return "-"
    return f"ends in {ends_in:g} s" if ends_in > 0 else "free"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0, round(seconds))} s ago"
    if seconds < 7200:
        return f"{round(seconds / 60)} min ago"
    return f"{round(seconds / 3600)} h ago"
