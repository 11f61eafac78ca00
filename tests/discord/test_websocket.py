"""The gateway's websocket: batches per read, pings, fragments, size limit, closes, handshake."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

from picortex.discord import websocket as websocket_module
from picortex.discord.websocket import (
    ABNORMAL_CLOSURE,
    MESSAGE_TOO_BIG,
    WebSocket,
    WebSocketClosed,
    open_websocket,
)
from picortex.errors import GatewayError


class Peer:
    """The server end: wsproto on the other half of an in-memory stream pair."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)
        self.events: list[Any] = []

    async def accept(self) -> None:
        while not any(isinstance(e, Request) for e in self.events):
            await self.read()
        await self.stream.send_all(self.ws.send(AcceptConnection()))

    async def read(self) -> None:
        data = await self.stream.receive_some(65536)
        self.ws.receive_data(bytes(data) if data else None)
        self.events.extend(self.ws.events())

    async def send(self, *events: Any) -> None:
        await self.stream.send_all(b"".join(self.ws.send(e) for e in events))


@asynccontextmanager
async def connected(max_message: int = 1 << 20) -> AsyncIterator[tuple[WebSocket, Peer]]:
    client, server = trio.testing.memory_stream_pair()
    ws = WSConnection(ConnectionType.CLIENT)
    peer = Peer(server)
    await client.send_all(ws.send(Request(host="gateway.test", target="/?v=10")))
    await peer.accept()
    await websocket_module._handshake(client, ws)
    yield WebSocket(client, ws, max_message=max_message, read_bytes=65536), peer


async def test_one_read_brings_every_frame_that_arrived() -> None:
    async with connected() as (sock, peer):
        await peer.send(*(TextMessage(data=f'{{"n": {n}}}') for n in range(50)))
        assert await sock.receive() == [f'{{"n": {n}}}' for n in range(50)]


async def test_fragments_are_joined_and_bytes_stay_bytes() -> None:
    async with connected() as (sock, peer):
        await peer.send(
            BytesMessage(data=b"\x01\x02", message_finished=False),
            BytesMessage(data=b"\x03", message_finished=True),
            TextMessage(data="hel", message_finished=False),
        )
        assert await sock.receive() == [b"\x01\x02\x03"]
        await peer.send(TextMessage(data="lo", message_finished=True))
        assert await sock.receive() == ["hello"]


async def test_a_ping_is_answered_with_a_pong() -> None:
    async with connected() as (sock, peer):
        await peer.send(Ping(payload=b"are you there"), TextMessage(data="after"))
        assert await sock.receive() == ["after"]
        await peer.read()
        assert [e.payload for e in peer.events if isinstance(e, Pong)] == [b"are you there"]


async def test_a_message_over_the_limit_closes_with_1009() -> None:
    async with connected(max_message=10) as (sock, peer):
        await peer.send(TextMessage(data="x" * 11))
        with pytest.raises(WebSocketClosed):
            await sock.receive()
        assert sock.close_code == MESSAGE_TOO_BIG
        await peer.read()
        assert [e.code for e in peer.events if isinstance(e, CloseConnection)] == [1009]


async def test_the_peers_close_is_echoed_and_reported() -> None:
    async with connected() as (sock, peer):
        await peer.send(TextMessage(data="last"), CloseConnection(code=4000, reason="bye"))
        assert await sock.receive() == ["last"]
        with pytest.raises(WebSocketClosed):
            await sock.receive()
        assert (sock.close_code, sock.close_reason) == (4000, "bye")
        await peer.read()
        assert [e.code for e in peer.events if isinstance(e, CloseConnection)] == [4000]
        with pytest.raises(WebSocketClosed):
            await sock.send("too late")


async def test_our_close_frame_then_the_reply_ends_reading() -> None:
    async with connected() as (sock, peer):
        await sock.send_close(4900, "resuming")
        await peer.read()
        (close,) = [e for e in peer.events if isinstance(e, CloseConnection)]
        assert (close.code, close.reason) == (4900, "resuming")
        await peer.send(close.response())
        with pytest.raises(WebSocketClosed):
            await sock.receive()


async def test_a_dropped_stream_is_an_abnormal_closure() -> None:
    async with connected() as (sock, peer):
        await peer.stream.aclose()
        with pytest.raises(WebSocketClosed):
            await sock.receive()
        assert sock.close_code == ABNORMAL_CLOSURE


async def test_a_refused_upgrade_is_a_gateway_error() -> None:
    async def refuse(stream: trio.SocketStream) -> None:
        peer = Peer(stream)
        while not any(isinstance(e, Request) for e in peer.events):
            await peer.read()
        await peer.send(RejectConnection(status_code=403, has_body=False))

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, refuse, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        with pytest.raises(GatewayError, match="HTTP 403"):
            await open_websocket(f"ws://127.0.0.1:{port}/", max_message=100, read_bytes=100)
        nursery.cancel_scope.cancel()


async def test_only_websocket_urls_are_opened() -> None:
    with pytest.raises(GatewayError, match="not a websocket URL"):
        await open_websocket("https://discord.test/", max_message=100, read_bytes=100)
