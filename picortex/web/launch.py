"""The panel beside the simulator: what `demo --web` and `sim --chat --web` print and wait for."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, TextIO

import trio

from picortex.web.auth import load_or_create_token, login_link

if TYPE_CHECKING:
    from picortex.app import Bot


async def announce(bot: Bot, out: TextIO) -> None:
    """Wait for the bot's panel and print its address and a login link."""
    if bot.web is None:
        return
    with trio.move_on_after(10):
        await bot.web.ready.wait()
    if bot.web.url is None:
        print("panel: not served (see the warning above)", file=out, flush=True)
        return
    token = load_or_create_token(bot.settings.home)
    print(f"panel: {bot.web.url}", file=out)
    print(f"log in: {login_link(bot.web.url, token, time.time())}", file=out, flush=True)


async def until_interrupted() -> None:
    """Return at SIGINT or SIGTERM."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def web_toml(enabled: bool) -> str:
    """The `[web]` table for a throwaway home: a free port, so nothing else is in the way."""
    return f"[web]\nenabled = {'true' if enabled else 'false'}\nport = 0\n"
