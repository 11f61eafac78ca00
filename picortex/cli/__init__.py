"""The `picortex` command line: the parser and the dispatch; one module per command.

Each command module (`run`, `demo`, `sim`, `log`, `errors`, `config`, `discriminator`,
`prompts`, `status`, `backup`, `web`, `mcp`) has `command(args) -> exit code`. Commands read files
and talk to the bot; they never decide.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

from picortex import __version__
from picortex.core.events import EVENT_TYPES
from picortex.core.shards import ShardSpec, parse_shards
from picortex.errors import ConfigError, PicortexError, SupervisorExhausted

EXIT_OK: int = 0
EXIT_USAGE: int = 2
EXIT_SUPERVISOR_GAVE_UP: int = 70


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one sentence and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"picortex: {message} (see `picortex --help`)\n")


def _shard(text: str) -> tuple[int, int]:
    try:
        sid, count = (int(p) for p in text.split("/", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard must look like ID/COUNT, got {text!r}") from None
    if count < 1 or not 0 <= sid < count:
        raise argparse.ArgumentTypeError(f"--shard {text}: need 0 <= ID < COUNT")
    return sid, count


def _shards(text: str) -> ShardSpec:
    try:
        return parse_shards(text, "--shards")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# Command -> the module of this package that runs it (imported only when used, so that
# `picortex log` does not load trio, httpx and the bot).
_MODULES: Final = {
    "run": "run",
    "demo": "demo",
    "sim": "sim",
    "log": "log",
    "errors": "errors",
    "discriminator": "discriminator",
    "prompts": "prompts",
    "config": "config",
    "backup": "backup",
    "status": "status",
    "web": "web",
    "mcp": "mcp",
    "cluster": "cluster",
}


def build_parser() -> argparse.ArgumentParser:
    """The full command tree of SPEC section 2."""
    p = _Parser(
        prog="picortex",
        description="A long-lived Discord bot runtime.",
        epilog="Every command reads PICORTEX_HOME (default ~/.picortex).",
    )
    p.add_argument("--version", action="version", version=f"picortex {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run the bot until SIGINT/SIGTERM")
    run.add_argument(
        "--shards",
        type=_shards,
        metavar="IDS/COUNT",
        help="serve these shards of COUNT: 2/8, 0-3,8-11/16 or auto/16 (all that are free); "
        "default: [cluster] shards, else 0/1",
    )
    run.add_argument(
        "--capacity",
        type=_count,
        metavar="N",
        help="serve at most N of those shards (default: [cluster] capacity, else all)",
    )
    run.add_argument(
        "--shard",
        type=_shard,
        metavar="ID/COUNT",
        help="serve the one shard ID of COUNT (the same as --shards ID/COUNT)",
    )

    demo = sub.add_parser("demo", help="zero-setup showcase against the built-in simulator")
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo home for inspection afterwards"
    )
    demo.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="shorten the continuation and poll windows by this factor (default 1)",
    )
    demo.add_argument(
        "--offline",
        action="store_true",
        help="use the simulator's offline model even when ANTHROPIC_API_KEY is set",
    )
    demo.add_argument("--web", action="store_true", help="serve the panel, stay up until Ctrl-C")

    sim = sub.add_parser("sim", help="run the built-in Discord simulator")
    sim.add_argument(
        "--chat",
        action="store_true",
        help="also run the bot and chat with it from this terminal as a user",
    )
    sim.add_argument(
        "--port",
        type=int,
        default=0,
        help="the simulator's HTTP port for REST, model and control (default 0: any free port)",
    )
    sim.add_argument("--web", action="store_true", help="with --chat: serve the panel too")
    sim.add_argument(
        "--guilds",
        type=int,
        default=0,
        help="also create this many guilds (guild-0, ...), spread over shards as on Discord",
    )
    sim.add_argument(
        "--channels-per-guild",
        type=int,
        default=2,
        help="text channels in each of the --guilds guilds (default 2)",
    )
    sim.add_argument(
        "--shards",
        type=_count,
        default=None,
        help="the shard count GET /gateway/bot recommends (default: one per 1,000 guilds)",
    )
    sim.add_argument(
        "--max-concurrency",
        type=_count,
        default=None,
        help="session_start_limit.max_concurrency; IDENTIFYs are then paced per bucket "
        "(shard_id %% max_concurrency): one per 5 s, a second one gets op 9",
    )

    log = sub.add_parser(
        "log",
        help="read actions.jsonl",
        description="Read the action log (actions.jsonl and its rotated files).",
        epilog="event types: " + ", ".join(EVENT_TYPES),
    )
    log.add_argument("-n", type=_count, default=None, metavar="N", help="only the last N lines")
    log.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new lines as they come"
    )
    log.add_argument(
        "--event",
        action="append",
        default=[],
        metavar="TYPE",
        help="only events of this type (repeatable); the types are listed below",
    )
    log.add_argument("--json", action="store_true", help="print the raw JSON lines")

    errors = sub.add_parser("errors", help="list failed model invocations")
    errors.add_argument("--unresolved", action="store_true", help="only errors not yet resolved")
    errors.add_argument("--json", action="store_true", help="print a JSON array of the rows")
    errors.add_argument(
        "--patterns",
        action="store_true",
        help="group unresolved failures by persona and stage",
    )
    esub = errors.add_subparsers(dest="errors_command", parser_class=_Parser)
    resolve = esub.add_parser("resolve", help="mark an error resolved")
    resolve.add_argument("id", type=int, help="the error's id (first column of the list)")
    resolve.add_argument(
        "--as",
        dest="resolution",
        required=True,
        choices=["fixed", "dismissed", "composted"],
        help="how it was resolved",
    )

    disc = sub.add_parser("discriminator", help="the attention discriminator")
    dsub = disc.add_subparsers(dest="disc_command", required=True, parser_class=_Parser)
    dtest = dsub.add_parser("test", help="run it on a chat's last cached messages")
    dtest.add_argument("chat", help="the chat's channel id")
    dtest.add_argument(
        "-n", type=_count, default=5, help="how many recent messages to decide (default 5)"
    )

    prompts = sub.add_parser("prompts", help="discriminator prompt versions")
    psub = prompts.add_subparsers(dest="prompts_command", required=True, parser_class=_Parser)
    phist = psub.add_parser("history", help="the prompt's version history")
    phist.add_argument("chat", help="the chat's channel id")

    config = sub.add_parser("config", help="read or change runtime config")
    csub = config.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    cget = csub.add_parser("get", help="print one key, or every key without one")
    cget.add_argument("key", nargs="?", help="a dotted key such as budget.ceiling_usd")
    cset = csub.add_parser("set", help="change a key; the running bot sees it at once")
    cset.add_argument("key", help="a dotted key such as budget.ceiling_usd")
    cset.add_argument("value", help="the new value")

    backup = sub.add_parser(
        "backup",
        help="copy picortex.db consistently, even while the bot runs",
        description="A consistent copy of picortex.db (SQLite's online backup).",
    )
    backup.add_argument("path", help="the new file to write (never overwritten)")

    sub.add_parser("status", help="ask the running bot how it is")
    sub.add_parser("web", help="the panel's address and a one-time login link")
    sub.add_parser("mcp", help="serve the Model Context Protocol on stdio (for assistants)")

    cluster = sub.add_parser("cluster", help="the PostgreSQL a cluster of processes shares")
    clsub = cluster.add_subparsers(dest="cluster_command", required=True, parser_class=_Parser)
    clsub.add_parser("init", help="create or migrate the schema; print its version")
    clstatus = clsub.add_parser("status", help="the processes, the shards each holds, sessions")
    clstatus.add_argument("--json", action="store_true", help="print it as JSON")
    return p


class _RedactingFilter(logging.Filter):
    """Writes tokens and keys as `[redacted]` in every log line, traceback included."""

    def filter(self, record: logging.LogRecord) -> bool:
        from picortex.core.redact import redact
        from picortex.core.terminal import clean_text

        text = record.getMessage()
        if record.exc_info:
            text = f"{text}\n{logging.Formatter().formatException(record.exc_info)}"
            record.exc_info = None
            record.exc_text = None
        # Log lines go to a terminal and may quote remote text: no control characters.
        record.msg = clean_text(redact(text))
        record.args = None
        return True


def _quiet_http(record: logging.LogRecord) -> bool:
    """Drop httpx's line per request: noise for a bot owner (picortex logs failures itself)."""
    return not (record.name.startswith("httpx") and record.levelno < logging.WARNING)


def _log_to_stderr() -> None:
    """Log lines to stderr, redacted and without httpx's per-request noise.

    Only when nobody logs yet: a program that calls `main` with its own handlers (a test
    runner) keeps them untouched.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("picortex: %(levelname)s: %(message)s"))
    handler.addFilter(_quiet_http)
    handler.addFilter(_RedactingFilter())
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `picortex` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    # Whatever picortex or a tool it runs (git, for chat homes) creates is the owner's alone;
    # the files that matter are also chmodded explicitly, so this is a second line.
    os.umask(0o077)
    _log_to_stderr()
    try:
        module = importlib.import_module(f"picortex.cli.{_MODULES[args.command]}")
        run_command: Callable[[argparse.Namespace], int] = module.command
        return run_command(args)
    except SupervisorExhausted as e:
        print(f"picortex: giving up: {e}", file=sys.stderr)
        return EXIT_SUPERVISOR_GAVE_UP
    except PicortexError as e:
        # Bad configuration (2), a refused token (3), a database that cannot be opened, a
        # chat home git cannot write: one sentence, and the exit code the error's class says.
        print(f"picortex: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        # A file or folder the command needs cannot be used: say which, in one sentence.
        where = f"{e.filename}: " if e.filename else ""
        print(f"picortex: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK


def entry() -> NoReturn:
    """The `picortex` console script and `python -m picortex`: `main`, then exit at once."""
    code = main()
    # The process ends here. Python's last garbage collections would walk every object the
    # imports made (the model SDK's classes: a few tenths of a second of a short command);
    # a frozen heap is not walked, and the operating system frees it all the same.
    gc.freeze()
    sys.exit(code)
