"""The router against fakes of its narrow clients (no store, no REST, no simulator)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from picortex.actors import router as router_mod
from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.delivery import ChannelReply, Delivery
from picortex.actors.pipeline import ChannelRegistry
from picortex.actors.router import Router
from picortex.actors.router_clients import RouterRoles
from picortex.actors.slash_request import SlashRequest
from picortex.config import load_settings
from picortex.core import commands as cmds
from picortex.core import policy
from picortex.core import slash as sl
from picortex.core.continuation import ContinuationState, on_trigger
from picortex.discord.normalize import normalize
from picortex.runtime.mailbox import Mailbox
from picortex.runtime.supervisor import ChildSpec
from picortex.store.store import ChatConfig
from picortex.types import BotIdentity, Channel, Message
from tests.actors.fakes import FakeSettings, FakeStore
from tests.helpers import RecordingSink

BOT_ID = 99
OWNER_ID = 1
STRANGER_ID = 2
TRUSTED_ID = 3
GUILD = 20
CHANNEL = 10
THREAD = 11  # a public thread of CHANNEL
PUBLIC_THREAD = 11  # Discord's channel type
FIRST_SEQ = 100  # the gateway seq of the first dispatch handed over


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
    answers_seen: AnswersSeen = attrs.Factory(AnswersSeen)
    personas: None = None
    faults: None = None
    spawn: Callable[..., None] | None = None
    fatal: None = None
    rest: None = None
    replies: FakeReplies | None = None


class FakeReplies:
    def reply_target(self, command: str | None) -> policy.Target:
        return "channel"


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
    def __init__(
        self, mailbox: Mailbox[Delivery], windows: Callable[[ContinuationState], None]
    ) -> None:
        self.mailbox = mailbox
        self.windows = windows  # tells the router the channel's open requests

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()


def roles(fake: FakeClients) -> RouterRoles:
    """Every role the router takes, played by the one fake."""
    return RouterRoles(reads=fake, feeds=fake, posting=fake, slash=fake, personas=fake)


def payload(i: int, author_id: int, content: str, *, channel: int = CHANNEL) -> dict[str, Any]:
    """A MESSAGE_CREATE as Discord sends it (the fields the router reads)."""
    mentions = [{"id": str(BOT_ID), "username": "bot"}] if f"<@{BOT_ID}>" in content else []
    return {
        "id": str(i),
        "channel_id": str(channel),
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


async def routing(
    tmp_path: Path,
    dispatches: list[dict[str, Any]],
    *,
    owner: int | None = OWNER_ID,
    setup: Callable[[FakeClients], None] | None = None,
    event: str = "MESSAGE_CREATE",
) -> Routed:
    """Run a router on fakes (`setup` fills them first), hand it `dispatches` and wait until
    it is idle again."""
    env = {"PICORTEX_HOME": str(tmp_path)}
    if owner is not None:
        env["PICORTEX_OWNER_ID"] = str(owner)
    clients = FakeClients(settings=FakeSettings(load_settings(env)))
    if setup is not None:
        setup(clients)
    channels = FakeChannels()
    actors: dict[int, FakeActor] = {}

    def new_actor(
        channel_id: int, mailbox: Mailbox[Delivery], windows: Callable[[ContinuationState], None]
    ) -> FakeActor:
        actors[channel_id] = FakeActor(mailbox, windows)
        return actors[channel_id]

    router = Router(roles(clients), channels, new_actor)
    chatter_at_dispatch = []
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        await trio.testing.wait_all_tasks_blocked()
        for i, data in enumerate(dispatches):
            router.on_dispatch(event, data, FIRST_SEQ + i)
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
    delivery = mailbox.receive_nowait()
    # One value carries the request, the seq it came with and where its answer goes.
    assert delivery.id == 6
    assert delivery.seq == FIRST_SEQ
    assert isinstance(delivery.sink, ChannelReply)
    assert delivery.sink.trigger is delivery.request
    assert run.clients.handled.routed_seqs == [FIRST_SEQ]
    # In hand (not final yet: its channel decides), fed to the context.
    assert run.clients.handled.in_hand == {6}
    assert run.clients.handled.finished == []
    assert run.clients.cache.messages == [6]
    assert run.clients.store.noted == []


async def test_a_trusted_authors_chatter_is_kept_for_recall_and_final_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    def trust(clients: FakeClients) -> None:
        clients.store.tiers[TRUSTED_ID] = "user"

    dispatches = [payload(7, TRUSTED_ID, "nice weather today"), payload(8, OWNER_ID, "indeed")]
    run = await routing(tmp_path, dispatches, setup=trust)
    assert run.chatter_at_dispatch == [1, 2]
    assert run.router.trusted_chatter == 2
    assert run.router.delivered == 0
    # Kept for recall (SPEC 8) and final here: no mailbox, nothing left in hand.
    assert run.clients.store.kept == [7, 8]
    assert run.clients.handled.finished == [7, 8]
    assert run.clients.store.noted == []


async def test_without_an_owner_nobody_is_trusted_for_want_of_a_list_entry(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    run = await routing(tmp_path, [payload(7, OWNER_ID, "nice weather today")], owner=None)
    assert run.router.chatter == 1
    assert run.router.trusted_chatter == 0
    assert run.clients.store.kept == []
    assert run.clients.store.noted == [7]


async def test_the_bots_own_answer_is_kept_for_recall_and_never_queued(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    run = await routing(tmp_path, [payload(9, BOT_ID, "here is my answer")])
    assert run.clients.store.kept == [9]
    assert run.clients.cache.messages == [9]
    assert (run.router.chatter, run.router.delivered) == (0, 0)
    assert run.clients.store.noted == []
    assert run.channels.started == []


def thread_of_channel(
    parent_mode: str | None, own_mode: str | None
) -> Callable[[FakeClients], None]:
    """A setup: THREAD is a thread of CHANNEL, each with the chat mode given (None: no row)."""

    def setup(clients: FakeClients) -> None:
        clients.registry.add(Channel(id=CHANNEL, type=0, guild_id=GUILD))
        clients.registry.add(
            Channel(id=THREAD, type=PUBLIC_THREAD, guild_id=GUILD, parent_id=CHANNEL)
        )
        for chat_id, mode in ((CHANNEL, parent_mode), (THREAD, own_mode)):
            if mode is not None:
                clients.store.chat_configs[chat_id] = ChatConfig(chat_id, mode, None, None, 0.0)

    return setup


async def test_a_thread_without_a_mode_of_its_own_takes_its_parent_channels(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The parent answers `always`: its thread's messages are weighed by the channel actor.
    message = payload(12, STRANGER_ID, "nice weather today", channel=THREAD)
    run = await routing(tmp_path, [message], setup=thread_of_channel("always", None))
    assert (run.router.chatter, run.router.delivered) == (0, 1)
    assert run.channels.started == [f"channel-{THREAD}"]


async def test_a_threads_own_mode_wins_over_its_parent_channels(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    message = payload(12, STRANGER_ID, "nice weather today", channel=THREAD)
    setup = thread_of_channel("always", "mentions-only")
    run = await routing(tmp_path, [message], setup=setup)
    assert (run.router.chatter, run.router.delivered) == (1, 0)
    assert run.channels.started == []


async def test_an_unreadable_trust_list_settles_chatter_as_a_strangers(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    def unreadable(clients: FakeClients) -> None:
        def get_tier(user_id: int) -> str | None:
            raise RuntimeError("store closed")

        clients.store.get_tier = get_tier  # type: ignore[method-assign]

    run = await routing(tmp_path, [payload(7, TRUSTED_ID, "nice weather today")], setup=unreadable)
    # Fails closed: counted and noted as seen like a stranger's, kept for nobody's recall.
    assert (run.router.chatter, run.router.trusted_chatter) == (1, 0)
    assert run.clients.store.kept == []
    assert run.clients.store.noted == [7]


async def test_a_trusted_authors_chatter_that_may_continue_a_request_goes_to_its_channel(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The channel tells the router its open requests; the router asks no actor."""
    env = {"PICORTEX_HOME": str(tmp_path), "PICORTEX_OWNER_ID": str(OWNER_ID)}
    clients = FakeClients(settings=FakeSettings(load_settings(env)))
    clients.store.tiers[TRUSTED_ID] = "user"
    channels = FakeChannels()
    actors: dict[int, FakeActor] = {}

    def new_actor(
        channel_id: int, mailbox: Mailbox[Delivery], windows: Callable[[ContinuationState], None]
    ) -> FakeActor:
        actors[channel_id] = FakeActor(mailbox, windows)
        return actors[channel_id]

    router = Router(roles(clients), channels, new_actor)
    trigger = payload(30, TRUSTED_ID, f"<@{BOT_ID}> what is the plan")
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        router.on_dispatch("MESSAGE_CREATE", trigger, 1)
        await trio.testing.wait_all_tasks_blocked()
        actor = actors[CHANNEL]
        actor.mailbox.receive_nowait()  # the channel takes the trigger ...
        actor.mailbox.done()
        message = normalize("MESSAGE_CREATE", trigger)
        assert isinstance(message, Message)
        actor.windows(on_trigger(ContinuationState(10.0), message)[0])  # ... and opens a window
        router.on_dispatch("MESSAGE_CREATE", payload(31, TRUSTED_ID, "and for lunch"), 2)
        await trio.testing.wait_all_tasks_blocked()
        assert (router.delivered, router.chatter) == (2, 0)
        assert actor.mailbox.receive_nowait().id == 31
        actor.mailbox.done()
        actor.windows(ContinuationState(10.0))  # answered and closed: chatter again
        router.on_dispatch("MESSAGE_CREATE", payload(32, TRUSTED_ID, "never mind"), 3)
        await trio.testing.wait_all_tasks_blocked()
        assert (router.delivered, router.chatter) == (2, 1)
        nursery.cancel_scope.cancel()


async def test_a_message_for_its_channel_is_normalized_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def counting(name: str, data: Any) -> object:
        calls.append(name)
        return normalize(name, data)

    monkeypatch.setattr(router_mod, "normalize", counting)
    run = await routing(tmp_path, [payload(40, OWNER_ID, f"<@{BOT_ID}> hello")])
    assert run.router.delivered == 1
    assert calls == ["MESSAGE_CREATE"]  # on the reader's inline path; the task takes it as is


async def test_a_slash_command_reaches_its_channel_as_a_request_built_by_the_router(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    spawned: list[object] = []

    def setup(clients: FakeClients) -> None:
        clients.spawn = lambda fn, *args: spawned.append(fn)
        clients.replies = FakeReplies()

    interaction = {
        "id": "41",
        "application_id": "3",
        "type": 2,
        "token": "secret-token",
        "channel_id": str(CHANNEL),
        "guild_id": str(GUILD),
        "member": {"user": {"id": str(OWNER_ID), "username": "owner"}},
        "data": {"name": "picortex", "options": [{"name": "help", "type": sl.SUB_COMMAND}]},
    }
    run = await routing(tmp_path, [interaction], setup=setup, event="INTERACTION_CREATE")
    assert run.router.delivered == 1
    delivery = run.actors[CHANNEL].mailbox.receive_nowait()
    request = delivery.request
    # The channel is handed the command as parsed once, by the router: nothing is left to
    # turn into a request on the channel's side.
    assert isinstance(request, SlashRequest)
    assert (request.id, request.channel_id, request.text) == (41, CHANNEL, "help")
    assert isinstance(request.action, cmds.Help)
    assert delivery.message.content == "/picortex help"
    assert len(spawned) == 1  # the deferral timer, in case the channel is late
