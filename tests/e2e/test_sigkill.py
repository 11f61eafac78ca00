"""SIGKILL during traffic, then restart (SPEC 12): state intact, nothing answered twice.

The bot runs as a real `picortex run` process (forked from one that imported the bot, see
tests/e2e/forkserver.py) against a simulator in this test.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import trio

from picortex.sim import DefaultWorld, Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs
from picortex.store import Store
from tests.e2e.forkserver import ForkedBot, ForkServer, fork_server
from tests.e2e.harness import RELAXED_BUCKETS, run_cli

TRIGGERS = 40
START_TIMEOUT = 30.0


def _env(home: Path, sim: Simulator, urls: SimURLs, owner: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env.update(
        PICORTEX_HOME=str(home),
        DISCORD_BOT_TOKEN=sim.token,
        DISCORD_API_BASE=urls.api_base,
        ANTHROPIC_API_KEY="sk-ant-test-key-0000",
        ANTHROPIC_BASE_URL=urls.anthropic_base_url,
        PICORTEX_OWNER_ID=str(owner),
    )
    return env


@asynccontextmanager
async def _bot_process(
    server: ForkServer,
    home: Path,
    sim: Simulator,
    urls: SimURLs,
    world: DefaultWorld,
    run_no: int,
) -> AsyncIterator[ForkedBot]:
    """`picortex run` in a process of its own; yields once its gateway session is ready."""
    # A restarted process RESUMEs the session the killed one left, or IDENTIFYs afresh.
    sessions = sim.gateway_stats.identifies + sim.gateway_stats.resumes
    proc = await server.start(_env(home, sim, urls, world.alice_id), home / f"run{run_no}.err")
    try:
        with trio.fail_after(START_TIMEOUT):
            await sim.wait_until(
                lambda: (
                    sim.gateway_stats.identifies + sim.gateway_stats.resumes > sessions
                    and sim.gateway_stats.ready_sessions >= 1
                )
            )
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()


def _dm_texts(sim: Simulator, user_id: int) -> list[str]:
    return [m["content"] for m in sim.bot_messages(sim.open_dm(user_id))]


async def _wait(sim: Simulator, predicate: object, timeout: float = START_TIMEOUT) -> None:
    assert callable(predicate)
    with trio.fail_after(timeout):
        await sim.wait_until(predicate)


@pytest.mark.long(seconds=6)
@pytest.mark.forked_bots
async def test_sigkill_mid_traffic_then_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # Per-user limits off: this traffic is about kills, not budgets.
    (home / "picortex.toml").write_text(
        "continuation_seconds = 0\n[budget]\nuser_requests_per_minute = 0\nuser_daily_usd = 0\n"
    )
    sim = Simulator(heartbeat_interval_ms=5000)
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 1000, 1.0)
    world = sim.add_default_world()
    w = world
    mention = f"<@{sim.bot_user_id}>"
    # Both bot processes are forked from one that imported the bot once (forkserver.py).
    async with fork_server() as server, trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        sent: list[dict[str, object]] = []

        async with _bot_process(server, home, sim, urls, world, 1) as proc:
            # State worth keeping: a trusted user and a changed runtime setting.
            sim.post_user_message(
                w.general_id, w.alice_id, f"{mention} !s whitelist add <@{w.bob_id}> trusted"
            )
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 1)
            sim.post_user_message(w.general_id, w.alice_id, f"{mention} !s config set wakeword !k")
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 2)
            assert "is now `!k`" in _dm_texts(sim, w.alice_id)[1]
            # Traffic in two channels from two authors; answers take a little while.
            sim.model.script(*[ModelReply(text=f"answer {n}", delay=0.02) for n in range(TRIGGERS)])
            for n in range(TRIGGERS):
                channel = (w.general_id, w.random_id)[n % 2]
                author = (w.alice_id, w.bob_id)[(n // 2) % 2]
                sent.append(sim.post_user_message(channel, author, f"{mention} question {n}"))
                await trio.sleep(0.01)
                if n == TRIGGERS // 2:
                    await _wait(sim, lambda: len(sim.bot_messages()) >= 6)
                    proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert proc.returncode == -signal.SIGKILL

        referenced = {
            (m.get("message_reference") or {}).get("message_id") for m in sim.bot_messages()
        }
        answered_before = sum(1 for m in sent if m["id"] in referenced)
        # Killed mid-traffic: some triggers were answered, others were still waiting.
        assert 0 < answered_before < TRIGGERS // 2
        # Whatever the kill left behind, every complete log line parses.
        lines = (home / "actions.jsonl").read_bytes().split(b"\n")
        for line in lines[:-1]:
            orjson.loads(line)

        sim.model.clear_script()
        async with _bot_process(server, home, sim, urls, world, 2) as proc:
            # The new process answers (with the new wakeword) and knows bob is trusted.
            sim.post_user_message(w.general_id, w.alice_id, f"{mention} !k whitelist list")
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 3)
            assert f"<@{w.bob_id}>: trusted" in _dm_texts(sim, w.alice_id)[2]
            # The session was resumed: the triggers caught in flight are answered now.
            assert sim.gateway_stats.resumes == 1
            await _wait(
                sim,
                lambda: all(
                    any(
                        (m.get("message_reference") or {}).get("message_id") == sent_msg["id"]
                        for m in sim.bot_messages()
                    )
                    for sent_msg in sent
                ),
            )
            late = sim.post_user_message(w.random_id, w.bob_id, f"{mention} after the restart?")
            await _wait(
                sim,
                lambda: any(
                    (m.get("message_reference") or {}).get("message_id") == late["id"]
                    for m in sim.bot_messages(w.random_id)
                ),
            )
            # A clean stop: SIGTERM, exit code 0, the log flushed.
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(START_TIMEOUT):
                await proc.wait()
            assert proc.returncode == 0, (home / "run2.err").read_text()

        nursery.cancel_scope.cancel()

    # Nothing was answered twice, before or after the kill.
    referenced = [(m.get("message_reference") or {}).get("message_id") for m in sim.bot_messages()]
    for msg in sent:
        assert referenced.count(msg["id"]) == 1  # never lost, never twice
    # Trust list and config are intact in the database.
    with Store.open(home / "picortex.db") as store:
        assert store.trust_list() == [(w.bob_id, "trusted")]
        assert store.runtime_config() == {"wakeword": "!k"}
        assert store.integrity_check() == "ok"
    shown = await run_cli(home, "config", "get", "wakeword")
    assert shown.stdout.strip() == "wakeword = !k  (runtime)"
    # The log is readable end to end: `picortex log --json` prints only whole JSON lines.
    log = await run_cli(home, "log", "--json")
    assert log.returncode == 0, log.stderr
    events = [orjson.loads(line) for line in log.stdout.splitlines()]
    assert any(e["event"] == "reply" for e in events)
    assert events[-1]["event"] == "supervisor"  # the clean stop was recorded last
