"""discord.py, a client nobody here wrote, against the simulator: it must not notice.

discord.py runs in a subprocess with `Route.BASE` pointed at the simulator; as
`AutoShardedClient` it discovers the gateway with GET /gateway/bot, connects with its
default transport compression (zstd-stream when zstandard is installed), identifies with
a shard, and reconnects on its own after a drop or an op 7.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from picortex.sim import DefaultWorld, Simulator, SimURLs

CLIENT = r"""
import json
import logging
import sys

import discord

discord.http.Route.BASE = sys.argv[1]
intents = discord.Intents.default()
intents.message_content = True
client = discord.AutoShardedClient(intents=intents, guild_ready_timeout=0.2)


def emit(**fields):
    print(json.dumps(fields), flush=True)


@client.event
async def on_ready():
    emit(
        event="ready",
        user=client.user.id,
        guilds=[g.id for g in client.guilds],
        channels=sorted(c.id for g in client.guilds for c in g.text_channels),
    )


@client.event
async def on_resumed():
    emit(event="resumed")


@client.event
async def on_message(message):
    if message.author.id == client.user.id:
        emit(event="own", content=message.content)
        return
    emit(
        event="message",
        id=message.id,
        content=message.content,
        channel=message.channel.id,
        guild=message.guild.id if message.guild else None,
        author=message.author.name,
        display_name=message.author.display_name,
        system=message.author.system,
        mentions=[u.id for u in message.mentions],
        forward=message.reference.type.name if message.reference else None,
        snapshots=[
            {"content": s.content, "files": [a.filename for a in s.attachments]}
            for s in message.message_snapshots
        ],
        poll=(
            {
                "question": message.poll.question,
                "answers": [a.text for a in message.poll.answers],
            }
            if message.poll
            else None
        ),
        stickers=[s.name for s in message.stickers],
        files=[a.filename for a in message.attachments],
    )
    if "echo" in message.content:
        await message.reply("echo: " + message.content, mention_author=False)
        await message.add_reaction("\N{THUMBS UP SIGN}")


@client.event
async def on_raw_bulk_message_delete(payload):
    emit(event="bulk_delete", ids=sorted(payload.message_ids), channel=payload.channel_id)


@client.event
async def on_guild_channel_delete(channel):
    emit(event="channel_delete", id=channel.id)


@client.event
async def on_raw_thread_delete(payload):
    emit(event="thread_delete", id=payload.thread_id, parent=payload.parent_id)


client.run(sys.argv[2], log_handler=logging.StreamHandler(sys.stderr), log_level=logging.WARNING)
"""


class _Events:
    """JSON lines from the client's stdout, consumed in order."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""
        self.seen: list[dict[str, Any]] = []

    async def next(self, event: str) -> dict[str, Any]:
        while True:
            while b"\n" not in self._buffer:
                chunk = await self._stream.receive_some(65536)
                assert chunk, f"the discord.py client exited before sending {event!r}"
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            if not line.strip().startswith(b"{"):
                continue
            item: dict[str, Any] = json.loads(line)
            self.seen.append(item)
            if item["event"] == event:
                return item


async def _drain(stream: trio.abc.ReceiveStream, into: list[bytes]) -> None:
    while chunk := await stream.receive_some(65536):
        into.append(chunk)


async def drive_client(
    client_source: str,
    sim: Simulator,
    urls: SimURLs,
    tmp_path: Path,
    exchange: Callable[[_Events], Awaitable[None]],
) -> None:
    """Runs a discord.py client script against the simulator while `exchange` reads its
    events; the client's stderr must show no traceback."""
    script = tmp_path / "client.py"
    script.write_text(client_source)
    stderr: list[bytes] = []
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(script), urls.api_base, sim.token],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    events = _Events(proc.stdout)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, proc.stderr, stderr)
            with trio.fail_after(60):
                try:
                    await exchange(events)
                except BaseException:
                    print("client events:", events.seen)
                    raise
            nursery.cancel_scope.cancel()
    finally:
        proc.kill()
        await proc.wait()
        await proc.stdout.aclose()
        await proc.stderr.aclose()
        print("client stderr:", b"".join(stderr).decode(errors="replace")[-3000:])
    assert b"Traceback" not in b"".join(stderr), b"".join(stderr).decode(errors="replace")


async def test_discordpy_reaches_ready_receives_and_replies(
    sim: Simulator, urls: SimURLs, world: DefaultWorld, tmp_path: Path
) -> None:
    await drive_client(
        CLIENT, sim, urls, tmp_path, lambda events: _conversation(sim, world, events)
    )


async def _conversation(sim: Simulator, world: DefaultWorld, events: _Events) -> None:
    ready = await events.next("ready")
    assert ready["user"] == sim.bot_user_id
    assert ready["guilds"] == [world.guild_id]
    assert ready["channels"] == sorted([world.general_id, world.random_id])
    paths = [r.path for r in sim.requests]
    assert "/gateway/bot" in paths
    assert sim.gateway_stats.last_connect_path is not None
    assert "compress=zstd-stream" in sim.gateway_stats.last_connect_path

    # A user speaks; discord.py gets on_message, replies with a reference and reacts.
    posted = sim.post_user_message(
        world.general_id, world.alice_id, f"<@{sim.bot_user_id}> echo one"
    )
    seen = await events.next("message")
    assert seen["id"] == int(posted["id"])
    assert (seen["author"], seen["guild"], seen["channel"]) == (
        "alice",
        world.guild_id,
        world.general_id,
    )
    assert seen["mentions"] == [sim.bot_user_id]
    replies = await sim.wait_bot_messages(1, world.general_id)
    assert replies[0]["content"] == f"echo: <@{sim.bot_user_id}> echo one"
    assert replies[0]["message_reference"]["message_id"] == posted["id"]
    assert (await events.next("own"))["content"] == replies[0]["content"]
    await sim.wait_until(lambda: any(r.method == "PUT" for r in sim.requests))
    reaction = next(r for r in sim.requests if r.method == "PUT")
    assert reaction.path.endswith("/reactions/%F0%9F%91%8D/@me")
    assert reaction.status == 204

    # The connection drops; a message sent meanwhile is replayed after discord.py resumes.
    sim.drop_connections()
    missed = sim.post_user_message(world.random_id, world.bob_id, "echo two")
    # Discord replays missed dispatches first, then sends RESUMED.
    assert (await events.next("message"))["id"] == int(missed["id"])
    await events.next("resumed")
    await sim.wait_bot_messages(2)

    # op 7: discord.py reconnects and resumes again, without a new IDENTIFY.
    sim.send_reconnect()
    await events.next("resumed")
    stats = sim.gateway_stats
    assert (stats.identifies, stats.resumes) == (1, 2)
    assert stats.resume_url_connections == 2

    await _nested_shapes(sim, world, events)


async def _nested_shapes(sim: Simulator, world: DefaultWorld, events: _Events) -> None:
    """Forwards, polls, stickers, nicknames, the system user and the delete events."""
    sim.set_nick(world.alice_id, "Ally")
    original = sim.post_user_message(
        world.general_id, world.alice_id, "the plan is ready", attachments=["plan.pdf"]
    )
    seen = await events.next("message")
    assert seen["id"] == int(original["id"])
    assert seen["display_name"] == "Ally"
    assert seen["files"] == ["plan.pdf"]

    forward = sim.forward_message(
        world.random_id, world.bob_id, world.general_id, int(original["id"])
    )
    seen = await events.next("message")
    assert seen["id"] == int(forward["id"])
    assert seen["content"] == ""
    assert seen["forward"] == "forward"
    assert seen["snapshots"] == [{"content": "the plan is ready", "files": ["plan.pdf"]}]

    poll = sim.post_user_message(
        world.general_id,
        world.bob_id,
        "",
        poll={
            "question": {"text": "Lunch?"},
            "answers": [{"poll_media": {"text": "pizza"}}, {"poll_media": {"text": "soup"}}],
        },
    )
    seen = await events.next("message")
    assert seen["id"] == int(poll["id"])
    assert seen["poll"] == {"question": "Lunch?", "answers": ["pizza", "soup"]}

    sticker = sim.post_user_message(world.general_id, world.bob_id, "", stickers=["Wave"])
    seen = await events.next("message")
    assert seen["id"] == int(sticker["id"])
    assert seen["stickers"] == ["Wave"]

    system = sim.add_user("Discord", system=True)
    # In a DM: discord.py keeps `system` on a User, but drops it when it builds a Member.
    sim.post_user_message(sim.open_dm(system), system, "official notice")
    seen = await events.next("message")
    assert seen["system"] is True

    purged = [int(poll["id"]), int(sticker["id"])]
    sim.delete_messages_bulk(world.general_id, purged)
    bulk = await events.next("bulk_delete")
    assert bulk == {"event": "bulk_delete", "ids": sorted(purged), "channel": world.general_id}

    thread = sim.world.start_thread(world.general_id, "side talk", owner_id=world.alice_id)
    sim.delete_channel(thread.id)
    gone = await events.next("thread_delete")
    assert (gone["id"], gone["parent"]) == (thread.id, world.general_id)
    sim.delete_channel(world.random_id)
    assert (await events.next("channel_delete"))["id"] == world.random_id


async def test_discordpy_shards_as_gateway_bot_recommends(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    sim = Simulator(recommended_shards=2, max_concurrency=2, limit_identify_concurrency=True)
    urls = await nursery.start(sim.serve)
    made = sim.add_guilds(6, 1)
    alice = sim.add_user("alice")

    async def exchange(events: _Events) -> None:
        ready = await events.next("ready")
        assert sorted(ready["guilds"]) == sorted(g for g, _ in made)
        for guild, [channel] in made:
            posted = sim.post_user_message(channel, alice, f"hello {guild}")
            seen = await events.next("message")
            assert (seen["id"], seen["guild"]) == (int(posted["id"]), guild)

    await drive_client(CLIENT, sim, urls, tmp_path, exchange)
    stats = sim.gateway_stats
    assert stats.shard_identifies == {0: 1, 1: 1}
    assert stats.identify_rate_limited == 0
    assert {s.shard for s in sim.gateway.sessions.values()} <= {(0, 2), (1, 2)}
    assert {(g >> 22) % 2 for g, _ in made} == {0, 1}  # both shards carried guilds
