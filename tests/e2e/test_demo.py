"""`picortex demo --offline` plays every scene, and every scene leaves its events in the log.

Through the command line's own entry (`cli.main`) in this process: `python -m picortex` runs
as a child process in the end-to-end tests of `run`, `mcp` and `sim --chat`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest

from picortex import cli

BAD_KEY = "sk-ant-not-a-working-key"

# `cli.main` sets up logging for a process; in this one, later tests need theirs back.
pytestmark = pytest.mark.usefixtures("root_logging_restored")


@pytest.mark.long(seconds=9)
def test_demo_transcript_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("PICORTEX_HOME", "PICORTEX_OWNER_ID", "DISCORD_BOT_TOKEN", "DISCORD_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # A key that would not work: `--offline` must use the simulator's model all the same.
    monkeypatch.setenv("ANTHROPIC_API_KEY", BAD_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    code = cli.main(["demo", "--keep", "--speed", "8", "--offline"])
    done = capsys.readouterr()
    out = done.out
    assert code == 0, out + done.err
    assert "OFFLINE model endpoint (--offline)" in out
    assert "the model failed" not in out
    assert BAD_KEY not in out + done.err
    for n in range(1, 16):
        assert f"[{n}] " in out
    assert "picortex in #general: This chat's agent prompt is set." in out
    assert re.search(r"picortex in #general: .*meeting room\? -- Captain Pico", out)
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
    assert "decision: respond (always mode answers every message (the author's own" in out
    # Money in dollars, fixed-point (SPEC 13), in every line that shows it.
    assert re.search(r"budget: workspace \S+ spent \$\d+\.\d{2,} of \$\d+\.\d{2,}:", out)
    assert re.search(r"llm: .* \(\$\d+\.\d{2,}, \d+ ms\)", out)
    assert "e-0" not in out
    assert "interaction: deferred" in out
    # Each slash answer names its command: the answered ask, then carol's refused one.
    answered = out.index("interaction answered (ask)")
    assert out.index("interaction refused (ask, only the user sees it)") > answered
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
    monkeypatch.setenv("PICORTEX_HOME", str(home))
    assert cli.main(["errors", "--json"]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert any(r["stage"] == "generate" for r in rows)
    shutil.rmtree(home, ignore_errors=True)
