"""The streamed reply writer (SPEC 16) against a recording surface, in virtual time."""

from __future__ import annotations

import itertools
from typing import Any

import trio

from picortex.actors.stream_reply import EMPTY_ANSWER, StreamedReply
from tests.spec import STREAM_EDIT_INTERVAL_SECONDS, check_reply_parts


class Surface:
    """Records every write with its time; each write takes `latency` seconds."""

    def __init__(self, latency: float = 0.2) -> None:
        self.latency = latency
        self.writes: list[tuple[float, str, int, str]] = []
        self.shown: list[str] = []

    async def post(self, index: int, text: str) -> None:
        await trio.sleep(self.latency)
        assert index == len(self.shown)
        self.shown.append(text)
        self.writes.append((trio.current_time(), "post", index, text))

    async def edit(self, index: int, text: str) -> None:
        await trio.sleep(self.latency)
        self.shown[index] = text
        self.writes.append((trio.current_time(), "edit", index, text))

    def times(self, kind: str) -> list[float]:
        return [t for t, k, _, _ in self.writes if k == kind]


async def feed_slowly(reply: StreamedReply, text: str, step: int, pace: float) -> None:
    for end in range(step, len(text) + step, step):
        await trio.sleep(pace)
        reply.feed(text[:end])
    reply.finish(text)


def answer() -> str:
    lines = [f"Step {n}: do the thing carefully and check it twice." for n in range(40)]
    code = ["```python", *(f"x_{n} = {n} * {n}" for n in range(50)), "```"]
    return "Here is the plan. " + "\n".join([*lines, *code, "That is all."])


async def test_edits_are_paced_the_text_splits_and_the_end_is_exact(autojump_clock: Any) -> None:
    text = answer()
    surface = Surface()
    reply = StreamedReply(surface)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.run)
        await feed_slowly(reply, text, 20, 0.05)
    check_reply_parts(text, surface.shown)
    assert len(surface.shown) >= 2
    assert all(m.count("```") % 2 == 0 for m in surface.shown)
    first_post = surface.writes[0]
    assert first_post[1] == "post"
    assert first_post[3].startswith("Here is the plan.")
    assert len(first_post[3]) < 40  # the first sentence, not the whole answer
    # Every write ends before the next edit starts by at least the interval (it came back).
    times = sorted(t for t, _, _, _ in surface.writes)
    edits = surface.times("edit")
    assert len(edits) >= 3
    for edit in edits:
        previous = max(t for t in times if t < edit)
        assert edit - surface.latency - previous >= STREAM_EDIT_INTERVAL_SECONDS - 1e-9
    assert min(b - a for a, b in itertools.pairwise(edits)) >= STREAM_EDIT_INTERVAL_SECONDS
    assert reply.edits == len(edits)


async def test_a_fast_answer_is_posted_whole_without_edits(autojump_clock: Any) -> None:
    surface = Surface()
    reply = StreamedReply(surface)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.run)
        reply.feed("All")
        reply.finish("All done")
    assert surface.writes == [(0.2, "post", 0, "All done")]


async def test_an_abandoned_or_stopped_reply_posts_nothing(autojump_clock: Any) -> None:
    async def no() -> bool:
        return False

    surface = Surface()
    reply = StreamedReply(surface, before_first_post=no)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.run)
        reply.feed("A sentence. And more")
    assert reply.abandoned
    stopped = StreamedReply(surface)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stopped.run)
        stopped.feed("no sentence yet")
        stopped.stop()
    assert surface.writes == []
    empty = StreamedReply(surface)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(empty.run)
        empty.finish("")
    assert surface.shown == [EMPTY_ANSWER]


async def test_a_failed_write_ends_the_writer_with_its_error(autojump_clock: Any) -> None:
    class Broken(Surface):
        async def post(self, index: int, text: str) -> None:
            raise RuntimeError("Discord is down")

    reply = StreamedReply(Broken())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.run)
        reply.finish("Hello.")
    assert isinstance(reply.failure, RuntimeError)
    assert not reply.started
