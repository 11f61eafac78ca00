"""`picortex sim --chat`: typed lines reach the bot, replies and reasons come back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _chat(script: str) -> str:
    """Types `script` into `picortex sim --chat` (offline model, fresh home); its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PICORTEX_"))}
    done = subprocess.run(
        [sys.executable, "-m", "picortex", "sim", "--chat"],
        input=script,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.long(seconds=6)
def test_chat_terminal_round_trip_and_slash_commands() -> None:
    # One child for both: each start of the terminal is a whole bot and simulator.
    slash = (
        "//picortex attention show\n"
        "//picortex whitelist add @bob trusted\n"
        "//picortex nonsense\n"
        "/as carol\n"
        "//picortex ask hello?\n"
    )
    chat = "/as alice\n@bot ping me back?\n/why\n/as carol\n@bot hello\n/why\n/dm\n/quit\n"
    out = _chat(slash + chat)
    # Slash commands typed as `//...`.
    assert "<- picortex: Attention mode: `mentions-only`" in out
    assert "<- picortex (only you see this): Added as trusted:" in out
    assert "(not sent: no subcommand 'nonsense')" in out
    assert "<- picortex (only you see this): You are not on this bot's trust list" in out
    # Typed lines reach the bot; `/why` shows its decisions.
    assert "picortex in #general: (offline model) You said:" in out
    assert "respond (the message mentions the bot)" in out
    assert "untrusted author" in out
    assert "[DM as carol]>" in out
    assert out.rstrip().endswith("bye")
