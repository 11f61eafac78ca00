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
from typing import Any

import apsw
import orjson
import pytest
import trio

from picortex.config import load_settings
from picortex.sim import DefaultWorld, Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs
from picortex.store import Store
from scripts.chaos_triggers import joined_requests, settle, tally
from tests.e2e.forkserver import ForkedBot, ForkServer, fork_server
from tests.e2e.harness import RELAXED_BUCKETS, run_cli

# Triggers answered before the kill, one after the other.
ANSWERED = 8
# How long the model holds the answers in flight at the kill: past the end of the process.
HOLD_SECONDS = 60.0
# How long it holds the replayed ones after the restart: a follow-up arrives meanwhile.
REPLAY_HOLD_SECONDS = 1.0
START_TIMEOUT = 30.0
# How often to look for the handled marks another process commits.
MARK_POLL_SECONDS = 0.02


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


async def _marked_handled(home: Path, message_ids: list[int]) -> None:
    """Wait until the bot process has committed these messages' handled marks."""
    wanted = set(message_ids)
    with trio.fail_after(START_TIMEOUT):
        while True:
            db = apsw.Connection(str(home / "picortex.db"), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                marked = {row[0] for row in db.execute("SELECT message_id FROM seen_events")}
            finally:
                db.close()
            if wanted <= marked:
                return
            await trio.sleep(MARK_POLL_SECONDS)


def _referenced_id(message: dict[str, Any]) -> str | None:
    reference = message.get("message_reference") or {}
    return reference.get("message_id")


def _referenced(sim: Simulator) -> list[str | None]:
    return [_referenced_id(m) for m in sim.bot_messages()]


@pytest.mark.long(seconds=6)
@pytest.mark.forked_bots
async def test_sigkill_mid_traffic_then_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # Per-user limits off: this traffic is about kills, not budgets. The continuation
    # window is the default one.
    (home / "picortex.toml").write_text(
        "[budget]\nuser_requests_per_minute = 0\nuser_daily_usd = 0\n"
    )
    sim = Simulator(heartbeat_interval_ms=5000)
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 1000, 1.0)
    world = sim.add_default_world()
    w = world
    mention = f"<@{sim.bot_user_id}>"
    # Each (channel, author) pair has one trigger in flight at the kill.
    pairs = [(c, a) for c in (w.general_id, w.random_id) for a in (w.alice_id, w.bob_id)]
    # Both bot processes are forked from one that imported the bot once (forkserver.py).
    async with fork_server() as server, trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        sent: list[dict[str, Any]] = []
        window = load_settings(_env(home, sim, urls, w.alice_id)).continuation_seconds

        def answers() -> tuple[int, int, int]:
            joined = joined_requests(home / "actions.jsonl")
            return tally(sim.bot_messages(), sent, joined, window)

        async with _bot_process(server, home, sim, urls, world, 1) as proc:
            # State worth keeping: a trusted user and a changed runtime setting.
            sim.post_user_message(
                w.general_id, w.alice_id, f"{mention} !s whitelist add <@{w.bob_id}> trusted"
            )
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 1)
            sim.post_user_message(w.general_id, w.alice_id, f"{mention} !s config set wakeword !k")
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 2)
            assert "is now `!k`" in _dm_texts(sim, w.alice_id)[1]
            # Traffic in two channels from two authors, each trigger answered before the next.
            for n in range(ANSWERED):
                channel, author = pairs[n % len(pairs)]
                sent.append(sim.post_user_message(channel, author, f"{mention} question {n}"))
                await _wait(sim, lambda: sent[-1]["id"] in _referenced(sim))
            # Final: marked handled, never to be answered again after the kill.
            await _marked_handled(home, [int(m["id"]) for m in sent])
            # Then one trigger per pair whose answer the model holds: in flight at the kill.
            sim.model.script(*[ModelReply(text="never posted", delay=HOLD_SECONDS)] * len(pairs))
            calls = len(sim.model.calls)
            for n, (channel, author) in enumerate(pairs, start=ANSWERED):
                sent.append(sim.post_user_message(channel, author, f"{mention} question {n}"))
            await _wait(sim, lambda: len(sim.model.calls) == calls + len(pairs))
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            assert proc.returncode == -signal.SIGKILL

        # Killed mid-traffic: the first triggers were answered, the held ones not.
        assert answers() == (ANSWERED, len(pairs), 0)
        # Whatever the kill left behind, every complete log line parses.
        lines = (home / "actions.jsonl").read_bytes().split(b"\n")
        for line in lines[:-1]:
            orjson.loads(line)
        # Said while the bot is down, a moment after a held trigger of the same author and
        # channel (inside its window by Discord's clock): replayed on RESUME together with it
        # while the new answer is being written, they make one request, answered once.
        follow_up = sim.post_user_message(w.general_id, w.alice_id, f"{mention} and this too?")
        sent.append(follow_up)
        sim.model.clear_script()
        sim.model.script(*[ModelReply(delay=REPLAY_HOLD_SECONDS)] * len(pairs))
        async with _bot_process(server, home, sim, urls, world, 2) as proc:
            # The new process answers (with the new wakeword) and knows bob is trusted.
            sim.post_user_message(w.general_id, w.alice_id, f"{mention} !k whitelist list")
            await _wait(sim, lambda: len(_dm_texts(sim, w.alice_id)) == 3)
            assert f"<@{w.bob_id}>: trusted" in _dm_texts(sim, w.alice_id)[2]
            # The session was resumed: the triggers caught in flight are answered now.
            assert sim.gateway_stats.resumes == 1
            await settle(sim, answers, START_TIMEOUT)
            assert answers()[1] == 0
            late = sim.post_user_message(w.random_id, w.bob_id, f"{mention} after the restart?")
            await _wait(sim, lambda: late["id"] in _referenced(sim))
            # A clean stop: SIGTERM, exit code 0, the log flushed.
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(START_TIMEOUT):
                await proc.wait()
            assert proc.returncode == 0, (home / "run2.err").read_text()

        nursery.cancel_scope.cancel()

    # Nothing was answered twice, before or after the kill, nor lost.
    assert answers() == (len(sent), 0, 0)
    held = sent[ANSWERED]  # alice's in general
    assert joined_requests(home / "actions.jsonl") == {follow_up["id"]: held["id"]}
    (reply,) = [m for m in sim.bot_messages() if _referenced_id(m) == held["id"]]
    assert "and this too?" in reply["content"]
    # Trust list and config are intact in the database.
    with Store.open(home / "picortex.db") as store:
        assert store.trust_list() == [(w.bob_id, "trusted")]
        assert store.runtime_config() == {"wakeword": "!k"}
        assert store.pragma("integrity_check") == "ok"
    shown = await run_cli(home, "config", "get", "wakeword")
    assert shown.stdout.strip() == "wakeword = !k  (runtime)"
    # The log is readable end to end: `picortex log --json` prints only whole JSON lines.
    log = await run_cli(home, "log", "--json")
    assert log.returncode == 0, log.stderr
    events = [orjson.loads(line) for line in log.stdout.splitlines()]
    assert any(e["event"] == "reply" for e in events)
    assert events[-1]["event"] == "supervisor"  # the clean stop was recorded last


@pytest.mark.long(seconds=4)
@pytest.mark.forked_bots
async def test_a_message_sent_after_a_replayed_requests_answer_is_a_request_of_its_own(
    tmp_path: Path,
) -> None:
    # SPEC 5.4 and 12: killed after posting an answer but before its trigger was marked
    # handled, the bot answers the trigger again after the restart (the repost is the same
    # message, by its nonce). A question sent after that first answer, by Discord's clock, is
    # not part of the replayed request, though it arrives while it is being answered.
    home = tmp_path / "home"
    home.mkdir()
    sim = Simulator(heartbeat_interval_ms=5000)
    world = sim.add_default_world()
    w = world
    mention = f"<@{sim.bot_user_id}>"
    async with fork_server() as server, trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        async with _bot_process(server, home, sim, urls, world, 1) as proc:
            warm = sim.post_user_message(w.general_id, w.alice_id, f"{mention} hello")
            await _wait(sim, lambda: warm["id"] in _referenced(sim))
            await _marked_handled(home, [int(warm["id"])])
            # Another writer holds the database: the answer goes out, its handled mark cannot.
            lock = apsw.Connection(str(home / "picortex.db"))
            lock.execute("BEGIN IMMEDIATE")
            try:
                first = sim.post_user_message(w.general_id, w.alice_id, f"{mention} first?")
                await _wait(sim, lambda: first["id"] in _referenced(sim))
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
            finally:
                lock.execute("ROLLBACK")
                lock.close()
        later = sim.post_user_message(w.general_id, w.alice_id, f"{mention} second?")
        # The replayed trigger's new answer is still being written when `later` arrives.
        sim.model.script(ModelReply(delay=REPLAY_HOLD_SECONDS))
        async with _bot_process(server, home, sim, urls, world, 2) as proc:
            await _wait(sim, lambda: later["id"] in _referenced(sim))
            assert sim.gateway_stats.resumes == 1
            await _wait(sim, lambda: sim.model.pending_script == 0)
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(START_TIMEOUT):
                await proc.wait()
            assert proc.returncode == 0, (home / "run2.err").read_text()
        nursery.cancel_scope.cancel()
    referenced = _referenced(sim)
    assert [referenced.count(m["id"]) for m in (warm, first, later)] == [1, 1, 1]
    (answer,) = [m for m in sim.bot_messages() if _referenced_id(m) == later["id"]]
    assert "second?" in answer["content"]
    assert joined_requests(home / "actions.jsonl") == {}
