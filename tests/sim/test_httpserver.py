"""The simulator's HTTP server: how a streamed response is written."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import h11

from picortex.sim.httpserver import HttpResponse, _send_response


class Recorder:
    """A stream that records each write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def _ready_connection() -> h11.Connection:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"POST /v1/messages HTTP/1.1\r\nHost: sim\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(conn.next_event(), h11.Request)
    assert isinstance(conn.next_event(), h11.EndOfMessage)
    return conn


async def test_a_streams_head_goes_out_with_its_first_part_then_each_part_alone() -> None:
    async def parts() -> AsyncGenerator[bytes, None]:
        yield b"event: one\n\n"
        yield b"event: two\n\n"

    stream = Recorder()
    await _send_response(_ready_connection(), stream, HttpResponse(200, stream=parts))  # type: ignore[arg-type]
    first, second, end = stream.writes
    assert first.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding: chunked" in first.lower()
    assert first.endswith(b"event: one\n\n\r\n")
    assert second.endswith(b"event: two\n\n\r\n") and b"HTTP/1.1" not in second
    assert end == b"0\r\n\r\n"


async def test_an_empty_stream_still_sends_its_head() -> None:
    async def nothing() -> AsyncGenerator[bytes, None]:
        return
        yield b""

    stream = Recorder()
    await _send_response(_ready_connection(), stream, HttpResponse(200, stream=nothing))  # type: ignore[arg-type]
    (only,) = stream.writes
    assert only.startswith(b"HTTP/1.1 200 ") and only.endswith(b"0\r\n\r\n")
