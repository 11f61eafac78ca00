"""Streamed replies end to end (SPEC 16), in virtual time: paced edits, splits, cuts."""

from __future__ import annotations

import gc
import itertools
from pathlib import Path
from typing import Any

import pytest

from picortex.config import BUILTIN_PRICES
from picortex.core.stream import CUT_NOTICE
from picortex.sim.model import ModelReply
from picortex.sim.rest import RecordedRequest
from tests.e2e.harness import Running, running_bot
from tests.spec import STREAM_EDIT_INTERVAL_SECONDS, check_reply_parts

pytestmark = pytest.mark.virtual_time

# Streamed in deltas of 96 characters, one every 0.4 s: a 3,000-character answer takes
# 12.5 s, long enough for several edits. (Bigger deltas, fewer of them: each is a jump of
# the virtual clock, which waits for the run to idle first.)
PACE = 0.4
CHUNK = 96
NO_CONTINUATION = "continuation_seconds = 0\n"
# Virtual times are sums of floats: equal gaps may differ in the last bits.
SLACK = 1e-9
# SPEC 16: edits at most once per 1.5 s.
MIN_EDIT_GAP = STREAM_EDIT_INTERVAL_SECONDS - SLACK


def long_answer() -> str:
    prose = [f"Point {n}: the explanation goes on, with words to fill it out." for n in range(25)]
    code = ["```python", *(f"value_{n} = compute({n})  # step {n}" for n in range(40)), "```"]
    tail = [f"Closing remark {n}, to end the answer well." for n in range(6)]
    text = "Here is the whole story. " + "\n".join([*prose, *code, *tail])
    assert 3000 <= len(text) <= 4000
    return text


def edits(run: Running, channel_id: int) -> list[RecordedRequest]:
    return [
        r
        for r in run.sim.requests
        if r.method == "PATCH" and r.path.startswith(f"/channels/{channel_id}/messages/")
    ]


def posts(run: Running, channel_id: int) -> list[RecordedRequest]:
    return [
        r
        for r in run.sim.requests
        if r.method == "POST" and r.path == f"/channels/{channel_id}/messages"
    ]


async def ask(run: Running, channel_id: int, text: str = "tell me everything") -> dict[str, Any]:
    return run.say(channel_id, run.world.alice_id, f"{run.mention()} {text}")


async def test_a_slow_answer_is_posted_at_its_first_sentence_and_edited_at_a_pace(
    tmp_path: Path,
) -> None:
    answer = long_answer()
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        general = run.world.general_id
        run.sim.model.script(ModelReply(text=answer, pace=PACE, chunk=CHUNK))
        trigger = await ask(run, general)
        (reply,) = await run.wait_event("reply")
        assert reply["result"] == "posted"
        assert reply["streamed"] is True
        shown = [m["content"] for m in run.sim.bot_messages(general)]
        # The final state is the full answer, split as any long reply is.
        check_reply_parts(answer, shown)
        assert len(shown) == 2
        for content in shown:
            assert content.count("```") % 2 == 0  # no code block broken across messages
        first, second = posts(run, general)
        # Posted once the first sentence was there, long before the answer was complete.
        assert first.json["content"].startswith("Here is the whole story.")
        assert len(first.json["content"]) < 200
        assert first.json["message_reference"]["message_id"] == trigger["id"]
        assert "message_reference" not in second.json  # the continuation is a plain message
        patches = edits(run, general)
        assert len(patches) >= 2
        times = sorted(p.at for p in patches)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= MIN_EDIT_GAP
        # Edits grow the text; the stream took about 16 s, so edits came throughout it.
        assert times[-1] - first.at >= 10
        assert reply["edits"] == len(patches)
        (call,) = run.sim.model.calls
        assert call.body["stream"] is True
        (llm,) = [e for e in run.events("llm") if e["stage"] == "generate"]
        assert llm["outcome"] == "ok"
        assert llm["output_tokens"] == len(answer) // 4  # from the stream's final usage


async def test_with_streaming_off_the_answer_is_posted_once_and_never_edited(
    tmp_path: Path,
) -> None:
    answer = long_answer()
    toml = NO_CONTINUATION + "[replies]\nstream = false\n"
    async with running_bot(tmp_path, toml=toml) as run:
        general = run.world.general_id
        run.sim.model.script(ModelReply(text=answer, pace=PACE, chunk=CHUNK))
        await ask(run, general)
        await run.wait_event("reply")
        check_reply_parts(answer, [m["content"] for m in run.sim.bot_messages(general)])
        assert edits(run, general) == []
        assert "stream" not in run.sim.model.calls[0].body


# An `error` event is raised from inside the SDK's SSE generators, which it leaves to the
# garbage collector; trio reports each as an unclosed async generator.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("stream_error", [None, "overloaded_error"])
async def test_a_stream_cut_midway_leaves_what_was_written_and_says_so(
    tmp_path: Path, stream_error: str | None
) -> None:
    answer = long_answer()
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        general = run.world.general_id
        run.sim.model.script(
            ModelReply(
                text=answer,
                pace=PACE,
                chunk=CHUNK,
                cut_after=600,
                stream_error=stream_error,
                input_tokens=900,
            )
        )
        trigger = await ask(run, general)
        (reply,) = await run.wait_event("reply")
        assert reply["result"] == "cut"
        (shown,) = [m["content"] for m in run.sim.bot_messages(general)]
        assert shown == answer[:600].rstrip() + "\n" + CUT_NOTICE
        await run.wait_until(lambda: bool(run.bot.store.invocation_errors()))
        (row,) = run.bot.store.invocation_errors()
        assert row.stage == "generate"
        assert row.signal_id == trigger["id"]
        assert "cut after 600 characters" in row.error_message
        assert len(run.sim.model.calls) == 1  # never retried
        (llm,) = [e for e in run.events("llm") if e["stage"] == "generate"]
        assert llm["outcome"] == "cut"
        # What the stream reported before it was cut is paid for: its `message_start` usage.
        assert (llm["input_tokens"], llm["output_tokens"]) == (900, 1)
        assert llm["cost_usd"] == BUILTIN_PRICES["claude-sonnet-5-5"].cost(900, 1)
    gc.collect()  # here, under this test's warning filter


async def test_a_dm_answer_streams_too(tmp_path: Path) -> None:
    answer = long_answer()[:1500]
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        dm = run.dm_id(run.world.alice_id)
        run.sim.model.script(ModelReply(text=answer, pace=PACE, chunk=CHUNK))
        run.say(dm, run.world.alice_id, "tell me everything")
        await run.wait_event("reply")
        check_reply_parts(answer, [m["content"] for m in run.sim.bot_messages(dm)])
        assert len(edits(run, dm)) >= 2


PERSONAS = {
    "agents.yaml": """
personas:
  - id: sleep
    name: Sleep Coach
    description: Helps people who sleep badly.
    domain_triggers: [sleep, slept, insomnia]
""",
}


async def test_a_persona_answer_streams_into_its_thread(
    tmp_path: Path,
) -> None:
    answer = long_answer()
    async with running_bot(tmp_path, toml=NO_CONTINUATION, files=PERSONAS) as run:
        general = run.world.general_id
        run.sim.model.script(ModelReply(text=answer, pace=PACE, chunk=CHUNK))
        trigger = await ask(run, general, "I slept terribly last night")
        (done,) = await run.wait_event("persona.responded")
        thread_id = int(trigger["id"])  # a thread started from a message has its id
        assert done["thread_id"] == str(thread_id)
        assert run.sim.bot_messages(general) == []
        check_reply_parts(answer, [m["content"] for m in run.sim.bot_messages(thread_id)])
        times = sorted(p.at for p in edits(run, thread_id))
        assert len(times) >= 2
        assert min(b - a for a, b in itertools.pairwise(times)) >= MIN_EDIT_GAP


async def test_a_slash_ask_streams_into_its_deferred_response(
    tmp_path: Path,
) -> None:
    answer = long_answer()
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        await run.wait_until(lambda: bool(run.sim.app_commands(None)))
        run.sim.model.script(ModelReply(text=answer, pace=PACE, chunk=CHUNK))
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask tell me everything")
        await run.wait_event("reply", trigger_id=ask.id, result="posted")
        kinds = [a.kind for a in ask.answers]
        assert kinds[0] == "deferred"
        assert kinds.count("edit") >= 2  # the response grew in place
        final: dict[int | None, str] = {}
        for part in ask.answers[1:]:
            final[None if part.kind == "edit" else part.message_id] = part.content
        check_reply_parts(answer, list(final.values()))
        patches = sorted(
            r.at for r in run.sim.requests if r.method == "PATCH" and "/webhooks/" in r.path
        )
        assert min(b - a for a, b in itertools.pairwise(patches)) >= MIN_EDIT_GAP
