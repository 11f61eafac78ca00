"""The `web` actor: serves the admin panel (SPEC 13) with hypercorn's trio worker.

It runs inside the bot's own trio run, under the services supervisor. A port that is taken
(or a host that cannot be bound) costs the panel, never the bot: one warning, then the actor
idles instead of crash-looping.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from picortex.config import WebSettings
from picortex.errors import ConfigError
from picortex.types import EventSink
from picortex.web.app import create_app
from picortex.web.auth import load_or_create_metrics_token, load_or_create_token
from picortex.web.panel import Panel

logger = logging.getLogger(__name__)

# Open requests get this long to finish when the bot shuts down.
GRACEFUL_SECONDS: Final = 2.0
BACKLOG: Final = 64


def panel_url(host: str, port: int) -> str:
    """The panel's base URL for a bound host and port."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class WebActor:
    """Binds `[web] host:port` and serves the panel until cancelled."""

    def __init__(
        self,
        settings: WebSettings,
        home: Path,
        panel: Callable[[], Panel],
        events: EventSink,
        *,
        wrong_token_delay: float | None = None,
    ) -> None:
        self._settings = settings
        self._home = home
        self._panel = panel
        self._events = events
        self._wrong_token_delay = wrong_token_delay
        self.url: str | None = None
        self.ready = trio.Event()

    def status(self) -> dict[str, object]:
        """Where the panel listens (for `picortex status` and `picortex web`)."""
        return {"url": self.url}

    def _bind(self) -> socket.socket:
        host, port = self._settings.host, self._settings.port
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def _warn_if_plain_http(self, where: str) -> None:
        # The panel speaks plain HTTP; beyond loopback the token and the session cookie need
        # TLS in front. `secure_cookies = true` is the owner saying it is there.
        if self._settings.loopback or self._settings.secure_cookies is True:
            return
        logger.warning(
            "web panel on %s is reachable beyond this machine over plain HTTP: put a TLS proxy "
            "in front and set [web] secure_cookies = true, or bind host = 127.0.0.1",
            where,
        )
        self._events.emit("web", outcome="plain_http", address=where)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; idle (after one warning) when the panel cannot be served."""
        where = f"{self._settings.host}:{self._settings.port}"
        try:
            token = load_or_create_token(self._home)
            metrics_token = load_or_create_metrics_token(self._home)
            sock = self._bind()
        except (OSError, ConfigError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            logger.warning("web panel not served on %s: %s", where, reason)
            self._events.emit("web", outcome="unavailable", address=where, error=reason)
            task_status.started()
            await trio.sleep_forever()
        try:
            host, port = sock.getsockname()[:2]
            self.url = panel_url(str(host), int(port))
            options: dict[str, object] = {
                "metrics_token": metrics_token,
                "secure_cookies": self._settings.cookies_secure,
            }
            if self._wrong_token_delay is not None:
                options["wrong_token_delay"] = self._wrong_token_delay
            app = create_app(self._panel(), token, **options)
            self._warn_if_plain_http(where)
            config = Config()
            config.graceful_timeout = GRACEFUL_SECONDS
            config.include_server_header = False
            config.accesslog = None
            config.errorlog = logging.getLogger("picortex.web.server")
            self._events.emit("web", outcome="listening", url=self.url)
            logger.info("web panel on %s", self.url)
            self.ready.set()
            task_status.started()
            await worker_serve(
                # Starlette's app type is its own spelling of the ASGI callable hypercorn takes.
                wrap_app(app, config.wsgi_max_body_size, "asgi"),  # type: ignore[arg-type]
                config,
                sockets=Sockets([], [sock], []),
            )
        finally:
            self.url = None
            with contextlib.suppress(OSError):
                sock.close()
