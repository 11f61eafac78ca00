"""`picortex prompts history CHAT`: the discriminator prompt's versions (its git log)."""

from __future__ import annotations

import argparse
import sys

from picortex.cli import common
from picortex.cli.discriminator import run_prompts_history


def command(args: argparse.Namespace) -> int:
    """Print the chat's prompt history."""
    return run_prompts_history(common.settings(), args.chat, out=sys.stdout)
