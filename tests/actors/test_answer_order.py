"""What goes out first on an answer's path: the model request before the typing indicator,
the reply as soon as the model's stream ends (before the call is closed, settled, logged),
and the call's bookkeeping behind the reply's post."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio

from picortex.actors.replies import TYPING_HOLD_SECONDS, TYPING_READ_DEFER_SECONDS, Replies
from picortex.actors.stream_reply import HANDOVER_SECONDS, StreamedReply
from picortex.discord import http
from tests.actors.test_llm import (
    FakeModel,
    make_actor,
    request,
    running,
    sdk_http,
    sse,
    stream_events,
)
from tests.helpers import RecordingSink

# ----- the typing indicator's hold ------------------------------------------------------------


class TypingRest:
    """Records when each typing request was made (trio's clock)."""

    def __init__(self) -> None:
        self.typing_at: list[float] = []
        # When each request's answer was read (its call returned), and whether it was held.
        self.read_at: list[float] = []
        self.held: list[bool] = []

    async def trigger_typing(
        self,
        channel_id: int,
        *,
        on_sent: Callable[[], None] | None = None,
        read_after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.typing_at.append(trio.current_time())
        if on_sent is not None:
            on_sent()
        self.held.append(read_after is not None)
        if read_after is not None:
            await read_after()
        self.read_at.append(trio.current_time())


def replies(rest: TypingRest) -> Replies:
    return Replies(
        lambda: None,  # type: ignore[arg-type, return-value]
        rest,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        RecordingSink(),
        fatal=lambda exc: None,
    )


async def test_a_held_indicator_goes_out_once_the_hold_is_released(autojump_clock: Any) -> None:
    rest = TypingRest()
    hold = trio.Event()
    start = trio.current_time()
    async with (
        trio.open_nursery() as nursery,
        replies(rest).typing(1, spawn=nursery.start_soon, hold=hold) as shown,
    ):
        await trio.sleep(0.1)
        assert rest.typing_at == []
        assert not shown.is_set()
        hold.set()
        await shown.wait()
    assert [round(at - start, 3) for at in rest.typing_at] == [0.1]


async def test_a_hold_never_released_delays_the_indicator_briefly(autojump_clock: Any) -> None:
    rest = TypingRest()
    start = trio.current_time()
    async with (
        trio.open_nursery() as nursery,
        replies(rest).typing(1, spawn=nursery.start_soon, hold=trio.Event()) as shown,
    ):
        await shown.wait()
    assert [round(at - start, 3) for at in rest.typing_at] == [TYPING_HOLD_SECONDS]


@pytest.mark.parametrize(
    ("answer_seconds", "read_after"),
    [
        pytest.param(0.03, 0.03, id="a quick answer: read once it is done"),
        pytest.param(2.0, TYPING_READ_DEFER_SECONDS, id="a slow answer: read after the deferral"),
    ],
)
async def test_without_a_hold_typing_goes_out_at_once_and_is_read_after_the_answer(
    autojump_clock: Any, answer_seconds: float, read_after: float
) -> None:
    rest = TypingRest()
    start = trio.current_time()
    async with (
        trio.open_nursery() as nursery,
        replies(rest).typing(1, spawn=nursery.start_soon) as shown,
    ):
        await shown.wait()
        await trio.sleep(answer_seconds)  # the answer, posted meanwhile
        assert len(rest.read_at) == (answer_seconds > TYPING_READ_DEFER_SECONDS)
    assert [round(at - start, 3) for at in rest.typing_at] == [0.0]
    # Discord's answer is read once the answer is done, at most the deferral later.
    assert [round(at - start, 3) for at in rest.read_at] == [read_after]


async def test_an_indicator_cancelled_with_its_block_never_defers_its_answer(
    autojump_clock: Any,
) -> None:
    rest = TypingRest()
    async with replies(rest).typing(1) as shown:
        await shown.wait()
    assert rest.held == [False]


# ----- the model call's signals ---------------------------------------------------------------


async def test_on_end_gets_the_whole_answer_before_the_call_is_logged() -> None:
    sink = RecordingSink()

    async def answer(body: dict[str, Any]) -> Any:
        return sdk_http.Response(
            200,
            content=stream_events(body["model"], ["Hello", " there", "?"]),
            headers={"content-type": "text/event-stream"},
        )

    ended: list[tuple[str, int]] = []

    def on_end(text: str) -> None:
        ended.append((text, len(sink.of("llm"))))

    async with running(make_actor(FakeModel(answer), sink)) as llm:
        result = await llm.complete(request(), on_text=lambda _: None, on_end=on_end)
    assert result.ok
    assert ended == [("Hello there?", 0)]
    assert len(sink.of("llm")) == 1


# The SDK raises an `error` event from inside its SSE generator and leaves the inner one to
# the garbage collector, which reports it as an unclosed async generator.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_failure_after_message_stop_keeps_the_whole_answer() -> None:
    sink = RecordingSink()
    body = stream_events("m", ["All of it."]) + sse(
        ("error", {"type": "error", "error": {"type": "api_error", "message": "late"}})
    )

    async def answer(_: dict[str, Any]) -> Any:
        return sdk_http.Response(200, content=body, headers={"content-type": "text/event-stream"})

    async with running(make_actor(FakeModel(answer), sink)) as llm:
        result = await llm.complete(request(), on_text=lambda _: None)
    assert result.ok
    assert result.text == "All of it."


async def test_on_sent_is_called_once_when_a_call_is_not_made() -> None:
    sink = RecordingSink()
    calls: list[str] = []
    async with running(make_actor(None, sink, api_key=None)) as llm:
        result = await llm.complete(request(), on_sent=lambda: calls.append("sent"))
    assert result.outcome == "no_key"
    assert calls == ["sent"]


async def test_on_sent_is_called_once_the_request_is_written_before_any_answer() -> None:
    """Over a real socket: the endpoint answers only once `on_sent` was called."""
    sent = trio.Event()
    calls: list[str] = []

    def on_sent() -> None:
        calls.append("sent")
        sent.set()

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some()
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += await stream.receive_some()
        with trio.fail_after(5):
            await sent.wait()
        payload = orjson.dumps(message)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )
        await stream.aclose()

    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        actor = make_actor(None, sink)
        actor._base_url = f"http://127.0.0.1:{port}"
        async with running(actor) as llm:
            with trio.fail_after(10):
                result = await llm.complete(request(), on_sent=on_sent)
        nursery.cancel_scope.cancel()
    assert result.ok, result.error
    assert result.text == "hi"
    assert calls == ["sent"]


async def test_an_awaitable_from_on_end_is_awaited_before_the_call_is_logged() -> None:
    sink = RecordingSink()

    async def answer(body: dict[str, Any]) -> Any:
        return sdk_http.Response(
            200,
            content=stream_events(body["model"], ["Whole."]),
            headers={"content-type": "text/event-stream"},
        )

    seen: list[int] = []

    async def behind_the_post() -> None:
        for _ in range(5):  # other tasks run meanwhile; the call itself waits
            await trio.lowlevel.checkpoint()
        seen.append(len(sink.of("llm")))

    def on_end(text: str) -> Any:
        return behind_the_post()

    async with running(make_actor(FakeModel(answer), sink)) as llm:
        result = await llm.complete(request(), on_text=lambda _: None, on_end=on_end)
    assert result.ok
    assert seen == [0]
    assert len(sink.of("llm")) == 1


# ----- the handover at the end of a streamed answer -------------------------------------------


class WrittenSurface:
    """A surface whose post is written at once and answered when `answer` is set."""

    def __init__(self, *, written: bool = True) -> None:
        self.written = written
        self.answer = trio.Event()
        self.posted: list[str] = []

    async def post(self, index: int, text: str) -> None:
        on_sent = http.task_on_sent()
        if self.written and on_sent is not None:
            on_sent()  # what the REST client's transport trace does once the body is written
        await self.answer.wait()
        self.posted.append(text)

    async def edit(self, index: int, text: str) -> None:
        raise AssertionError("a whole answer is posted, never edited")


@asynccontextmanager
async def writing(reply: StreamedReply) -> AsyncIterator[None]:
    """The reply's writer runs for the block."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.run)
        yield


async def handover_took(reply: StreamedReply, text: str) -> float:
    """Seconds from `finish(text)` until `handed_over` returned."""
    start = trio.current_time()
    reply.finish(text)
    await reply.handed_over()
    return trio.current_time() - start


async def test_the_handover_returns_once_the_first_post_is_written(autojump_clock: Any) -> None:
    surface = WrittenSurface()
    reply = StreamedReply(surface)
    async with writing(reply):
        assert await handover_took(reply, "The whole answer.") < HANDOVER_SECONDS
        # Written, not yet answered: the call's bookkeeping goes on behind the post.
        assert surface.posted == []
        surface.answer.set()
    assert surface.posted == ["The whole answer."]


async def test_a_post_waiting_for_its_turn_holds_the_handover_only_briefly(
    autojump_clock: Any,
) -> None:
    turn = trio.Event()

    async def before_first_post() -> bool:
        await turn.wait()
        return True

    surface = WrittenSurface()
    surface.answer.set()
    reply = StreamedReply(surface, before_first_post=before_first_post)
    async with writing(reply):
        assert await handover_took(reply, "Later.") == pytest.approx(HANDOVER_SECONDS)
        assert surface.posted == []
        turn.set()
    assert surface.posted == ["Later."]


async def test_the_handover_returns_when_the_writer_ends_or_its_surface_never_traces(
    autojump_clock: Any,
) -> None:
    async def not_posted() -> bool:
        return False

    abandoned = StreamedReply(WrittenSurface(), before_first_post=not_posted)
    async with writing(abandoned):
        assert await handover_took(abandoned, "Never shown.") < HANDOVER_SECONDS
    assert abandoned.abandoned

    silent = WrittenSurface(written=False)
    silent.answer.set()
    reply = StreamedReply(silent)
    async with writing(reply):
        assert await handover_took(reply, "Answered, so written.") < HANDOVER_SECONDS
    assert silent.posted == ["Answered, so written."]
