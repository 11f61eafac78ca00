"""The router against fakes of its narrow clients (no store, no REST, no simulator)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from picortex.actors.pipeline import BotIdentity, ChannelRegistry
from picortex.actors.router import Router
from picortex.config import Settings, load_settings
from picortex.runtime.mailbox import Mailbox
from picortex.runtime.supervisor import ChildSpec
from picortex.types import Interaction, Message
from tests.helpers import RecordingSink

BOT_ID = 99
OWNER_ID = 1
STRANGER_ID = 2
GUILD = 20
CHANNEL = 10


class FakeSettings:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __call__(self) -> Settings:
        return self.settings

    def refresh(self, *, force: bool = False) -> Settings:
        return self.settings


class FakeStore:
    """Nobody on the trust list, no chat config, every id unseen; writes recorded."""

    def __init__(self) -> None:
        self.noted: list[int] = []
        self.kept: list[int] = []

    def seen(self, message_id: int) -> bool | None:
        return False

    async def was_handled(self, message_id: int) -> bool:
        return False

    def note_seen(self, message_id: int) -> None:
        self.noted.append(message_id)

    def get_tier(self, user_id: int) -> str | None:
        return None

    def get_chat_config(self, chat_id: int) -> None:
        return None

    def add_memory_message(self, message_id: int, **fields: Any) -> None:
        self.kept.append(message_id)


class FakeCache:
    def __init__(self) -> None:
        self.messages: list[int] = []

    def on_message(self, message: Message) -> None:
        self.messages.append(message.id)


class FakeHandled:
    """The ledger's bookkeeping, as the router drives it."""

    def __init__(self) -> None:
        self.in_hand: set[int] = set()
        self.finished: list[int] = []
        self.routed_seqs: list[int | None] = []

    def known(self, message_id: int) -> bool:
        return message_id in self.in_hand

    def take(self, message_id: int, seq: int | None) -> bool:
        if message_id in self.in_hand:
            return False
        self.in_hand.add(message_id)
        return True

    def routed(self, seq: int | None) -> None:
        self.routed_seqs.append(seq)

    def finish(self, message_ids: Sequence[int], channel_id: int, guild_id: int | None) -> None:
        self.finished.extend(message_ids)

    def release(self, message_ids: Sequence[int]) -> None:
        self.in_hand.difference_update(message_ids)


@attrs.define
class FakeClients:
    """Only what routing a MESSAGE_CREATE touches; the rest is never called."""

    settings: FakeSettings
    events: RecordingSink = attrs.Factory(RecordingSink)
    store: FakeStore = attrs.Factory(FakeStore)
    cache: FakeCache = attrs.Factory(FakeCache)
    handled: FakeHandled = attrs.Factory(FakeHandled)
    bot: BotIdentity = attrs.Factory(lambda: BotIdentity(user_id=BOT_ID))
    registry: ChannelRegistry = attrs.Factory(ChannelRegistry)
    arrivals: dict[int, float] = attrs.Factory(dict)
    acks: dict[int, Any] = attrs.Factory(dict)
    personas: None = None
    faults: None = None
    spawn: None = None
    fatal: None = None
    rest: None = None
    replies: None = None


class FakeChannels:
    """The channel supervisor: records the children it is asked to start, runs none."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def get(self, name: str) -> ChildSpec | None:
        return None

    async def start_child(self, spec: ChildSpec) -> object:
        self.started.append(spec.name)
        return None


class FakeActor:
    def __init__(self, mailbox: Mailbox[Message | Interaction]) -> None:
        self.mailbox = mailbox

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    def may_continue(self, author_id: int, now: float) -> bool:
        return False


def payload(i: int, author_id: int, content: str) -> dict[str, Any]:
    """A MESSAGE_CREATE as Discord sends it (the fields the router reads)."""
    mentions = [{"id": str(BOT_ID), "username": "bot"}] if f"<@{BOT_ID}>" in content else []
    return {
        "id": str(i),
        "channel_id": str(CHANNEL),
        "guild_id": str(GUILD),
        "author": {"id": str(author_id), "username": f"user{author_id}"},
        "content": content,
        "timestamp": "2024-05-01T12:00:00+00:00",
        "mentions": mentions,
    }


@attrs.define
class Routed:
    router: Router
    clients: FakeClients
    channels: FakeChannels
    actors: dict[int, FakeActor]
    # The chatter count right after each `on_dispatch` returned, before any task ran.
    chatter_at_dispatch: list[int]


async def routing(tmp_path: Path, dispatches: list[dict[str, Any]]) -> Routed:
    """Run a router on fakes, hand it `dispatches` and wait until it is idle again."""
    env = {"PICORTEX_HOME": str(tmp_path), "PICORTEX_OWNER_ID": str(OWNER_ID)}
    clients = FakeClients(settings=FakeSettings(load_settings(env)))
    channels = FakeChannels()
    actors: dict[int, FakeActor] = {}

    def new_actor(channel_id: int, mailbox: Mailbox[Message | Interaction]) -> FakeActor:
        actors[channel_id] = FakeActor(mailbox)
        return actors[channel_id]

    router = Router(clients, channels, new_actor)
    chatter_at_dispatch = []
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        await trio.testing.wait_all_tasks_blocked()
        for data in dispatches:
            router.on_dispatch("MESSAGE_CREATE", data)
            chatter_at_dispatch.append(router.chatter)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return Routed(router, clients, channels, actors, chatter_at_dispatch)


async def test_chatter_is_decided_inline_counted_and_never_queued(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    run = await routing(tmp_path, [payload(5, STRANGER_ID, "nice weather today")])
    # Settled in on_dispatch itself, before the router's task ran: no mailbox hop.
    assert run.chatter_at_dispatch == [1]
    assert run.router.chatter == 1
    assert run.router.delivered == 0
    assert run.channels.started == []
    assert run.actors == {}
    # Fed to the context, noted as seen, neither logged one by one nor kept for recall.
    assert run.clients.cache.messages == [5]
    assert run.clients.store.noted == [5]
    assert run.clients.store.kept == []
    assert run.clients.events.of("decision") == []


async def test_an_addressed_message_goes_to_its_channels_mailbox(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    run = await routing(tmp_path, [payload(6, STRANGER_ID, f"<@{BOT_ID}> hello")])
    assert run.chatter_at_dispatch == [0]
    assert run.router.chatter == 0
    assert run.router.delivered == 1
    # One actor started for the channel, around the mailbox holding the message.
    assert run.channels.started == [f"channel-{CHANNEL}"]
    mailbox = run.actors[CHANNEL].mailbox
    assert mailbox.receive_nowait().id == 6
    # In hand (not final yet: its channel decides), stamped on arrival, fed to the context.
    assert run.clients.handled.in_hand == {6}
    assert run.clients.handled.finished == []
    assert 6 in run.clients.arrivals
    assert run.clients.cache.messages == [6]
    assert run.clients.store.noted == []
