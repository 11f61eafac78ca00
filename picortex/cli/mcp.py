"""`picortex mcp`: the Model Context Protocol server on stdio (picortex.mcp)."""

from __future__ import annotations

import argparse

from picortex.cli import common


def command(args: argparse.Namespace) -> int:
    """Serve MCP until the client closes stdin (exit 0)."""
    from picortex.mcp import run_mcp

    return run_mcp(common.settings())
