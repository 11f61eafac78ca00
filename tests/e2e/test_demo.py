"""`picortex demo --offline` runs end to end and every scene leaves its events in the log."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

BAD_KEY = "sk-ant-not-a-working-key"


@pytest.mark.long(seconds=13)
def test_demo_transcript_and_log(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PICORTEX_"))}
    env["TMPDIR"] = str(tmp_path)
    # A key that would not work: `--offline` must use the simulator's model all the same.
    env["ANTHROPIC_API_KEY"] = BAD_KEY
    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"
    done = subprocess.run(
        [sys.executable, "-m", "picortex", "demo", "--keep", "--speed", "4", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "OFFLINE model endpoint (--offline)" in out
    assert "the model failed" not in out
    assert BAD_KEY not in out + done.stderr
    for n in range(1, 14):
        assert f"[{n}] " in out
    assert "swatch.png" in out
    assert "I see 1 image" in out
    assert re.search(r"reply: streamed into 2 messages, edited \d+ times? as it grew", out)
    assert "decision: ignore (untrusted author" in out
    assert "model calls for it: 0" in out
    assert "continuation: joins the request" in out
    assert "thread 'Sandman responding'" in out
    assert "persona: matched sleep, fitness" in out
    assert "poll: result [0, 2]" in out
    assert "invocation failed at stage generate" in out
    assert "gateway: resumed" in out
    assert "budget: workspace" in out
    assert "interaction: deferred" in out
    assert "only carol sees: You are not on this bot's trust list" in out
    assert "did not finish" not in out

    kept = re.search(r"The demo home is kept: (\S+)", out)
    assert kept is not None
    home = Path(kept.group(1))
    rows = [orjson.loads(line) for line in (home / "actions.jsonl").read_bytes().splitlines()]
    kinds = {r["event"] for r in rows}
    for kind in (
        "trigger",
        "continuation",
        "command",
        "decision",
        "reply",
        "persona",
        "persona.responded",
        "llm",
        "budget",
        "cortex.invocation_failed",
        "gateway",
        "supervisor",
        "poll",
    ):
        assert kind in kinds, kind
    errors = subprocess.run(
        [sys.executable, "-m", "picortex", "errors", "--json"],
        capture_output=True,
        text=True,
        env={**env, "PICORTEX_HOME": str(home)},
        timeout=60,
        check=True,
    )
    rows = orjson.loads(errors.stdout)
    assert any(r["stage"] == "generate" for r in rows)
    shutil.rmtree(home, ignore_errors=True)
