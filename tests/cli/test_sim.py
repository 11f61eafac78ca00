"""`picortex sim` (run_sim): prints where it listens, serves, stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def test_run_sim_prints_urls_serves_and_exits_0_on_ctrl_c() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from picortex.cli.sim import run_sim; raise SystemExit(run_sim())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].strip().startswith("users:"):
            line = proc.stdout.readline()
            assert line, "run_sim stopped before printing its URLs"
            lines.append(line)
        text = "".join(lines)
        api_base = next(line.split()[-1] for line in lines if "DISCORD_API_BASE" in line)
        token = next(line.split()[-1] for line in lines if "DISCORD_BOT_TOKEN" in line)
        assert "gateway URL" in text
        assert "ANTHROPIC_BASE_URL" in text
        assert "/_sim" in text
        me = httpx.get(api_base + "/users/@me", headers={"Authorization": f"Bot {token}"})
        assert me.json()["username"] == "picortex"
        control = next(line.split()[-1] for line in lines if "control token" in line)
        state_url = api_base.replace("/api/v10", "/_sim/state")
        assert httpx.get(state_url).status_code == 401
        auth = {"Authorization": f"Bearer {control}"}
        channels = httpx.get(state_url, headers=auth).json()
        assert [c["name"] for c in channels["guilds"][0]["channels"]] == ["general", "random"]
        assert {u["username"] for u in channels["users"]} >= {"alice", "bob"}
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
