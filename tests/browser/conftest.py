"""The bot, the simulator and a headless Chromium for the panel's browser tests.

The bot runs in its own trio run on a thread (Playwright's sync API owns the test's thread);
tests reach it through trio's from_thread portal. Nothing waits on the wall clock: every wait
is for a page element, a simulator change or an action-log event.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest
import trio
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.harness import Running, running_bot

T = TypeVar("T")
START_SECONDS: Final = 60.0
# A generous ceiling for one page condition on a loaded machine; passing tests never wait it.
expect.set_options(timeout=30_000)
# Where screenshots of each page go, when set (the docs' pictures are made this way).
SCREENSHOT_ENV: Final = "PICORTEX_SCREENSHOTS"


def chromium_path() -> str:
    """Debian's chromium (no browser is downloaded): PICORTEX_CHROMIUM or the one on PATH."""
    found = os.environ.get("PICORTEX_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail("chromium is not installed: `apt-get install chromium` (.ci/run does it)")
    return found


class LiveBot:
    """A simulator and a bot with its panel, running on a thread."""

    def __init__(self, tmp_path: Path) -> None:
        self._tmp = tmp_path
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.run: Running | None = None
        self.url = ""
        self.token = ""
        self._thread = threading.Thread(target=self._thread_main, daemon=True)

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported to the test thread
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        async with running_bot(self._tmp, toml="[web]\nport = 0\n") as run:
            assert run.bot.web is not None
            await run.bot.web.ready.wait()
            self.run = run
            self.url = run.bot.web.url or ""
            self.token = (run.home / "web.token").read_text().strip()
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(START_SECONDS) or self._failure is not None:
            raise RuntimeError(f"the bot did not start: {self._failure!r}")

    def stop(self) -> None:
        if self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(START_SECONDS)
        if self._failure is not None:
            raise self._failure

    def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run `fn` in the bot's trio thread (the simulator is not thread-safe)."""
        assert self._token is not None
        return trio.from_thread.run_sync(lambda: fn(*args, **kw), trio_token=self._token)

    def wait_until(self, predicate: Callable[[Running], bool]) -> None:
        """Block until `predicate(run)` holds (checked as the simulator changes)."""
        run = self.running

        async def wait() -> None:
            await run.wait_until(lambda: predicate(run))

        assert self._token is not None
        trio.from_thread.run(wait, trio_token=self._token)

    def wait_event(self, event: str, **match: object) -> list[dict[str, Any]]:
        """Block until the action log has an event with these fields."""
        run = self.running

        async def wait() -> list[dict[str, Any]]:
            return await run.wait_event(event, **match)

        assert self._token is not None
        return trio.from_thread.run(wait, trio_token=self._token)

    @property
    def running(self) -> Running:
        assert self.run is not None
        return self.run

    def say(self, channel_id: int, author_id: int, content: str) -> str:
        """A user posts; returns the message id."""
        posted = self.call(self.running.say, channel_id, author_id, content)
        return str(posted["id"])


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True)
        yield browser
        browser.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveBot]:
    bot = LiveBot(tmp_path)
    bot.start()
    try:
        yield bot
    finally:
        bot.stop()


@pytest.fixture
def page(browser: Browser, live: LiveBot) -> Iterator[Page]:
    context = browser.new_context(base_url=live.url, viewport={"width": 1100, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield page
    context.close()


def screenshot(page: Page, name: str) -> None:
    """Save the page as docs/<name>.png when PICORTEX_SCREENSHOTS names a directory."""
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)
