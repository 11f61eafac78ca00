"""`picortex web`: the panel's address and a one-time login link."""

from __future__ import annotations

import argparse
import sys

from picortex.cli import common


def command(args: argparse.Namespace) -> int:
    """Print where the panel is and how to log in."""
    from picortex.web.cli import run_web

    return run_web(common.settings(), out=sys.stdout)
