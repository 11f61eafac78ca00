"""What each `picortex` subcommand does, once cli.py has parsed its arguments."""

from __future__ import annotations

import argparse
import errno
import sys
import time
from pathlib import Path

from picortex.config import Settings, load_settings, load_settings_for_reading
from picortex.errors import ConfigError


def dispatch(args: argparse.Namespace) -> int:
    """Run the subcommand named in `args.command` and return its exit code."""
    handler = _HANDLERS[args.command]
    return handler(args)


def _settings() -> Settings:
    return load_settings()


def _reading_settings() -> Settings:
    """Settings for `log`, `errors` and `status`: a broken picortex.toml is only a warning."""
    settings, problem = load_settings_for_reading()
    if problem is not None:
        print(f"picortex: warning: {problem} (reading with the defaults)", file=sys.stderr)
    return settings


def _home(settings: Settings) -> Path:
    """PICORTEX_HOME, created 0700 if needed; one sentence when that is impossible."""
    from picortex.files import private_dir

    try:
        return private_dir(settings.home)
    except OSError as exc:
        raise ConfigError(
            f"PICORTEX_HOME {settings.home} cannot be created or used "
            f"({exc.strerror or exc}); set PICORTEX_HOME to a folder you can write"
        ) from None


def _run(args: argparse.Namespace) -> int:
    from picortex.app import run_forever
    from picortex.store.lock import hold_home

    settings = _settings()
    if not settings.discord_token:
        raise ConfigError("DISCORD_BOT_TOKEN is not set")
    # One bot per home: a second one would answer every message twice.
    with hold_home(_home(settings)):
        return run_forever(settings, shard=args.shard)


def _demo(args: argparse.Namespace) -> int:
    from picortex.demo import run_demo

    return run_demo(
        keep=args.keep, speed=args.speed, out=sys.stdout, offline=args.offline, web=args.web
    )


def _sim(args: argparse.Namespace) -> int:
    try:
        if args.chat:
            from picortex.sim.chat import run_chat

            return run_chat(port=args.port, web=args.web)
        from picortex.sim.cli import run_sim

        return run_sim(port=args.port, out=sys.stdout)
    except (OSError, BaseExceptionGroup) as exc:
        if not _address_in_use(exc):
            raise
        raise ConfigError(
            f"port {args.port} is already in use; choose another with --port, or leave "
            "--port out to take any free one"
        ) from None


def _address_in_use(exc: BaseException) -> bool:
    """True when `exc` is (or a group holds) the error of binding a port already taken."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_address_in_use(inner) for inner in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def _log(args: argparse.Namespace) -> int:
    from picortex.logview import run_log

    settings = _reading_settings()
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
    from picortex.store import Store

    _home(settings)
    return Store.open(settings.db_path)


def _errors(args: argparse.Namespace) -> int:
    from picortex.errorsview import run_errors, run_resolve

    settings = _reading_settings()
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

    return run_status(_reading_settings(), out=sys.stdout)


def _web(args: argparse.Namespace) -> int:
    from picortex.web.cli import run_web

    return run_web(_settings(), out=sys.stdout)


def _discriminator(args: argparse.Namespace) -> int:
    from picortex.discriminator_cli import run_discriminator_test

    return run_discriminator_test(_settings(), args.chat, args.n, out=sys.stdout)


def _prompts(args: argparse.Namespace) -> int:
    from picortex.discriminator_cli import run_prompts_history

    return run_prompts_history(_settings(), args.chat, out=sys.stdout)


def _backup(args: argparse.Namespace) -> int:
    from picortex.store.backup import backup_database

    settings = _reading_settings()
    target = Path(args.path).expanduser()
    size = backup_database(settings.db_path, target)
    print(f"backed up {settings.db_path} to {target} ({size:,} bytes)")
    return 0


_HANDLERS = {
    "backup": _backup,
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
