"""What each `picortex` subcommand does, once cli.py has parsed its arguments."""

from __future__ import annotations

import argparse
import sys
import time

from picortex.config import Settings, load_settings
from picortex.errors import ConfigError


def dispatch(args: argparse.Namespace) -> int:
    """Run the subcommand named in `args.command` and return its exit code."""
    handler = _HANDLERS[args.command]
    return handler(args)


def _settings() -> Settings:
    return load_settings()


def _run(args: argparse.Namespace) -> int:
    from picortex.app import run_forever

    settings = _settings()
    if not settings.discord_token:
        raise ConfigError("DISCORD_BOT_TOKEN is not set")
    return run_forever(settings, shard=args.shard)


def _demo(args: argparse.Namespace) -> int:
    from picortex.demo import run_demo

    return run_demo(keep=args.keep, speed=args.speed, out=sys.stdout, web=args.web)


def _sim(args: argparse.Namespace) -> int:
    if args.chat:
        from picortex.sim.chat import run_chat

        return run_chat(port=args.port, web=args.web)
    from picortex.sim.cli import run_sim

    return run_sim(port=args.port, out=sys.stdout)


def _log(args: argparse.Namespace) -> int:
    from picortex.logview import run_log

    settings = _settings()
    return run_log(
        settings.action_log_path,
        n=args.n,
        follow=args.follow,
        events=tuple(args.event),
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
    )


def _open_store(settings: Settings):  # type: ignore[no-untyped-def]
    from picortex.files import private_dir
    from picortex.store import Store

    private_dir(settings.home)
    return Store.open(settings.db_path)


def _errors(args: argparse.Namespace) -> int:
    from picortex.errorsview import run_errors, run_resolve

    settings = _settings()
    store = _open_store(settings)
    try:
        if args.errors_command == "resolve":
            return run_resolve(
                store, args.id, args.resolution, sys.stdout, time.time(), err=sys.stderr
            )
        return run_errors(
            store,
            unresolved=args.unresolved,
            as_json=args.json,
            patterns=args.patterns,
            out=sys.stdout,
        )
    finally:
        store.close()


def _config(args: argparse.Namespace) -> int:
    from picortex.configcmd import run_config_get, run_config_set

    settings = _settings()
    store = _open_store(settings)
    try:
        if args.config_command == "get":
            return run_config_get(store, settings, args.key, sys.stdout, err=sys.stderr)
        return run_config_set(
            store, settings, args.key, args.value, sys.stdout, err=sys.stderr, now=time.time()
        )
    finally:
        store.close()


def _status(args: argparse.Namespace) -> int:
    from picortex.actors.control import run_status

    return run_status(_settings(), out=sys.stdout)


def _web(args: argparse.Namespace) -> int:
    from picortex.web.cli import run_web

    return run_web(_settings(), out=sys.stdout)


def _discriminator(args: argparse.Namespace) -> int:
    from picortex.discriminator_cli import run_discriminator_test

    return run_discriminator_test(_settings(), args.chat, args.n, out=sys.stdout)


def _prompts(args: argparse.Namespace) -> int:
    from picortex.discriminator_cli import run_prompts_history

    return run_prompts_history(_settings(), args.chat, out=sys.stdout)


_HANDLERS = {
    "run": _run,
    "demo": _demo,
    "sim": _sim,
    "log": _log,
    "errors": _errors,
    "config": _config,
    "status": _status,
    "discriminator": _discriminator,
    "prompts": _prompts,
    "web": _web,
}
