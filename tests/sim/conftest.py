"""Fixtures for the simulator tests: a served Simulator and a raw gateway client."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio
import trio_websocket
import zstandard

from picortex.sim import DefaultWorld, Simulator, SimURLs

# GUILDS | GUILD_MESSAGES | GUILD_MESSAGE_REACTIONS | DIRECT_MESSAGES |
# DIRECT_MESSAGE_REACTIONS | MESSAGE_CONTENT: what picortex identifies with.
BOT_INTENTS = 1 | (1 << 9) | (1 << 10) | (1 << 12) | (1 << 13) | (1 << 15)
# The simulators here accept this token (a simulator makes up a random one when not given).
TOKEN = "sim-token"


@pytest.fixture
async def sim(nursery: trio.Nursery) -> Simulator:
    simulator = Simulator(TOKEN)
    await nursery.start(simulator.serve)
    return simulator


@pytest.fixture
def urls(sim: Simulator) -> SimURLs:
    assert sim.urls is not None
    return sim.urls


@pytest.fixture
def world(sim: Simulator) -> DefaultWorld:
    return sim.add_default_world()


@pytest.fixture
async def api(urls: SimURLs) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=urls.api_base, headers={"Authorization": f"Bot {TOKEN}"}
    ) as client:
        yield client


class RawGateway:
    """A bare gateway client: decompresses, parses, and remembers the last seq."""

    def __init__(self, ws: Any, compress: str | None) -> None:
        self.ws = ws
        self.compress = compress
        self.raw_frames: list[bytes | str] = []
        self.seq: int | None = None
        self._zlib = zlib.decompressobj() if compress == "zlib-stream" else None
        self._zstd = (
            zstandard.ZstdDecompressor().decompressobj() if compress == "zstd-stream" else None
        )

    async def recv(self) -> dict[str, Any]:
        frame = await self.ws.get_message()
        self.raw_frames.append(frame)
        if self._zlib is not None:
            assert isinstance(frame, bytes)
            assert frame.endswith(b"\x00\x00\xff\xff")
            data: bytes | str = self._zlib.decompress(frame)
        elif self._zstd is not None:
            assert isinstance(frame, bytes)
            data = self._zstd.decompress(frame)
        else:
            assert isinstance(frame, str), "uncompressed JSON comes as text frames"
            data = frame
        payload: dict[str, Any] = orjson.loads(data)
        if payload.get("s") is not None:
            self.seq = payload["s"]
        return payload

    async def recv_dispatch(self, name: str) -> dict[str, Any]:
        while True:
            payload = await self.recv()
            if payload["op"] == 0 and payload["t"] == name:
                return payload

    async def send(self, op: int, d: Any) -> None:
        await self.ws.send_message(orjson.dumps({"op": op, "d": d}).decode())

    async def identify(
        self,
        *,
        token: str = TOKEN,
        intents: int = BOT_INTENTS,
        shard: list[int] | None = None,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "token": token,
            "intents": intents,
            "properties": {"os": "linux", "browser": "tests", "device": "tests"},
        }
        if shard is not None:
            data["shard"] = shard
        await self.send(2, data)
        return await self.recv_dispatch("READY")

    async def resume(self, session_id: str, seq: int | None, token: str = TOKEN) -> None:
        await self.send(6, {"token": token, "session_id": session_id, "seq": seq})

    async def closed_code(self) -> int:
        """Read until the server closes; the close code."""
        with pytest.raises(trio_websocket.ConnectionClosed) as info:
            while True:
                await self.recv()
        assert info.value.reason is not None
        return int(info.value.reason.code)


@asynccontextmanager
async def open_ws(url: str) -> AsyncIterator[Any]:
    """A trio-websocket client connection that is always closed down to the socket."""
    async with trio_websocket.open_websocket_url(url) as ws:
        try:
            yield ws
        finally:
            # Leave like a dropped network (no close frame, so the session stays resumable);
            # this also closes the socket, which trio-websocket leaves open when the server
            # closes first.
            await ws._stream.aclose()


@asynccontextmanager
async def raw_gateway(
    url: str, *, compress: str | None = None, path: str = "/"
) -> AsyncIterator[RawGateway]:
    query = "?v=10&encoding=json" + (f"&compress={compress}" if compress else "")
    async with open_ws(url + path + query) as ws:
        gateway = RawGateway(ws, compress)
        hello = await gateway.recv()
        assert hello["op"] == 10
        yield gateway
