"""`picortex run`: the bot until SIGINT/SIGTERM, one per home."""

from __future__ import annotations

import argparse

from picortex.cli import common
from picortex.errors import ConfigError


def command(args: argparse.Namespace) -> int:
    """Run the bot; the exit code of SPEC 2."""
    from picortex.store.lock import hold_home
    from picortex.store.personas import load_personas

    settings = common.settings()
    if not settings.discord_token:
        raise ConfigError("DISCORD_BOT_TOKEN is not set")
    # Bad persona files stop the start (exit 2): say so before loading the whole bot (its
    # imports take a few seconds of CPU on a small machine). The bot loads them again.
    load_personas(common.home(settings))
    from picortex.app import run_forever

    # One bot per home: a second one would answer every message twice.
    with hold_home(common.home(settings)):
        return run_forever(settings, shard=args.shard)
