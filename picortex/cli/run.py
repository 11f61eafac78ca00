"""`picortex run`: the bot until SIGINT/SIGTERM, one per home."""

from __future__ import annotations

import argparse

from picortex.cli import common
from picortex.config import ClusterSettings
from picortex.core.leases import Want
from picortex.core.shards import ShardSpec
from picortex.errors import ConfigError


def held_shards(args: argparse.Namespace, cluster: ClusterSettings) -> list[tuple[int, int]]:
    """The (id, count) shards this process serves: `--shards` (or `--shard`), else
    `[cluster] shards`, else 0/1; at most `--capacity` (else `[cluster] capacity`) of them.

    Without a shared database nobody else can hold a shard, so `auto/N` means all N.
    """
    spec: ShardSpec | None = args.shards
    if args.shard is not None:
        if spec is not None:
            raise ConfigError("give --shards or --shard, not both")
        spec = ShardSpec(ids=(args.shard[0],), count=args.shard[1])
    spec = spec or cluster.shards or ShardSpec(ids=(0,), count=1)
    capacity = args.capacity if args.capacity is not None else cluster.capacity
    return [(shard_id, spec.count) for shard_id in spec.held(capacity)]


def leased_shards(args: argparse.Namespace, cluster: ClusterSettings) -> Want:
    """With a shared database: the shards this process may take by lease, and how many at
    most (`--capacity`, else `[cluster] capacity`, else as many as it names)."""
    spec: ShardSpec | None = args.shards
    if spec is None and args.shard is not None:
        spec = ShardSpec(ids=(args.shard[0],), count=args.shard[1])
    spec = spec or cluster.shards or ShardSpec(ids=(0,), count=1)
    capacity = args.capacity if args.capacity is not None else cluster.capacity
    return Want(
        ids=spec.ids,
        count=spec.count,
        capacity=capacity if capacity is not None else len(spec.held()),
        auto=spec.auto,
    )


def command(args: argparse.Namespace) -> int:
    """Run the bot; the exit code of SPEC 2."""
    from picortex.store.lock import hold_home
    from picortex.store.personas import load_personas

    settings = common.settings()
    shards = held_shards(args, settings.cluster)
    if not settings.discord_token:
        raise ConfigError("DISCORD_BOT_TOKEN is not set")
    # Bad persona files stop the start (exit 2): say so before loading the whole bot (its
    # imports take a few seconds of CPU on a small machine). The bot loads them again.
    load_personas(common.home(settings))
    from picortex.app import run_forever

    # One bot per home: a second one would answer every message twice.
    with hold_home(common.home(settings)):
        leased = leased_shards(args, settings.cluster) if settings.database_url else None
        return run_forever(settings, shards=shards, leased=leased)
