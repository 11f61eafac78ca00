"""`picortex web`: the panel's address and a one-time login link."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from picortex.actors.web import panel_url
from picortex.cli import common
from picortex.cli.status import query_status
from picortex.config import Settings
from picortex.web.auth import LINK_SECONDS, load_or_create_token, login_link

# A host that listens everywhere is reached from this machine through loopback.
_ANY_HOST = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - a lookup


def _address(settings: Settings) -> str:
    host = _ANY_HOST.get(settings.web.host, settings.web.host)
    return panel_url(host, settings.web.port)


def run_web(settings: Settings, *, out: TextIO) -> int:
    """Print the panel's address and a one-time login link.

    Returns:
        0 when the running bot serves the panel; 1 when the panel is off or no bot runs
        (the address and link are printed anyway, for when it starts).
    """
    if not settings.web.enabled:
        print("The panel is turned off: set [web] enabled = true in picortex.toml.", file=out)
        return 1
    token = load_or_create_token(settings.home)
    status = query_status(settings.home, timeout=2.0)
    served = (status or {}).get("web") or {}
    url = served.get("url") if isinstance(served, dict) else None
    base = str(url) if url else _address(settings)
    minutes = int(LINK_SECONDS // 60)
    print(f"panel:      {base}", file=out)
    print(f"log in:     {login_link(base, token, time.time())}", file=out)
    print(f"            (works once, for {minutes} minutes; the token is in web.token)", file=out)
    if status is None:
        print("picortex is not running: `picortex run` serves the panel.", file=out)
        return 1
    if not url:
        print(f"The running bot could not serve the panel on {base}; see its log.", file=out)
        return 1
    return 0


def command(args: argparse.Namespace) -> int:
    """Print where the panel is and how to log in."""
    return run_web(common.settings(), out=sys.stdout)
