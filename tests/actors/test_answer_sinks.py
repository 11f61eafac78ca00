"""The answer sinks against fakes: a message's reply, and an interaction's initial response
(whoever comes first, the channel's answer or the router's deferral timer, sends it)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from picortex.actors.delivery import ChannelReply
from picortex.actors.interaction_sink import (
    ACK_TRANSITIONS,
    AckEvent,
    AckState,
    InteractionSink,
)
from picortex.core import policy
from picortex.core import slash as sl
from picortex.errors import DiscordHTTPError
from picortex.types import Interaction, InteractionType, Message, User
from tests.helpers import RecordingSink

USER = User(id=1, username="owner")


class FakeInteractionRest:
    """Records each interaction route called, in order; `refuse` makes the initial one fail."""

    def __init__(self, *, refuse: bool = False, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refuse = refuse
        self.delay = delay

    async def create_interaction_response(
        self, interaction_id: int, token: str, body: dict[str, Any]
    ) -> None:
        await trio.sleep(self.delay)
        if self.refuse:
            raise DiscordHTTPError(400, 10062, "Unknown interaction")
        self.calls.append(("response", body["type"]))

    async def edit_original_interaction_response(
        self, application_id: int, token: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("edit", body["content"]))
        return {"id": "500"}

    async def create_followup_message(
        self, application_id: int, token: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("followup", body["content"]))
        return {"id": str(501 + len(self.calls))}


@attrs.define
class FakeClients:
    """What an interaction's sink uses: its routes, the action log, the fatal report."""

    rest: FakeInteractionRest
    events: RecordingSink = attrs.Factory(RecordingSink)
    fatal: None = None


def sink_for(rest: FakeInteractionRest, *, ephemeral: bool = False) -> InteractionSink:
    interaction = Interaction(
        id=7,
        application_id=3,
        type=InteractionType.APPLICATION_COMMAND,
        token="secret-token",
        channel_id=10,
        user=USER,
        guild_id=20,
    )
    return InteractionSink(FakeClients(rest), interaction, ephemeral=ephemeral)  # type: ignore[arg-type]


def test_the_ack_moves_only_as_its_table_says() -> None:
    assert set(ACK_TRANSITIONS) == {
        (AckState.PENDING, AckEvent.RESPOND),
        (AckState.PENDING, AckEvent.DEFER),
        (AckState.DEFERRING, AckEvent.DEFER_SENT),
        (AckState.DEFERRING, AckEvent.DEFER_REFUSED),
    }
    sink = sink_for(FakeInteractionRest())
    sink.state = AckState.RESPONDED
    with pytest.raises(KeyError):
        sink._move(AckEvent.DEFER)


async def test_an_answer_in_time_is_the_initial_response_and_the_timer_stays_quiet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest()
    sink = sink_for(rest)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.defer_at, trio.current_time() + 1.5)
        assert await sink.respond("hello", ephemeral=True, command="help")
    assert rest.calls == [("response", sl.CHANNEL_MESSAGE_WITH_SOURCE)]
    assert sink.state is AckState.RESPONDED


async def test_a_late_answer_edits_the_deferral_the_timer_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest()
    sink = sink_for(rest, ephemeral=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.defer_at, trio.current_time() + 1.5)
        await trio.sleep(2.0)
        assert await sink.respond("late", ephemeral=True, command="help")
    assert rest.calls == [("response", sl.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE), ("edit", "late")]
    assert sink.state is AckState.DEFERRED


async def test_an_answer_racing_the_deferral_waits_for_it_and_then_edits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest(delay=0.5)
    sink = sink_for(rest)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.defer_at, trio.current_time() + 1.5)
        await trio.sleep(1.6)  # the deferral is on its way
        assert sink.state is AckState.DEFERRING
        assert await sink.respond("now", ephemeral=False, command="help")
    assert rest.calls == [("response", sl.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE), ("edit", "now")]


async def test_a_refused_deferral_leaves_nothing_to_answer_and_says_so_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest(refuse=True)
    sink = sink_for(rest)
    await sink.defer_at(trio.current_time())
    assert sink.state is AckState.FAILED
    assert not await sink.respond("too late", ephemeral=False, command="help")
    assert rest.calls == []


async def test_an_ask_without_an_answer_gets_one_sentence_in_its_deferral(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest()
    sink = sink_for(rest)
    await sink.acknowledge()
    await sink.fail("Sorry, the budget is spent.")
    await sink.fail("Sorry, again.")  # told once
    assert rest.calls == [
        ("response", sl.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE),
        ("edit", "Sorry, the budget is spent."),
    ]


async def test_an_answered_ask_gets_no_failure_sentence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rest = FakeInteractionRest()
    sink = sink_for(rest)
    await sink.acknowledge()
    await sink.post("the answer")
    await sink.fail("Sorry.")
    assert rest.calls == [
        ("response", sl.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE),
        ("edit", "the answer"),
    ]
    assert sink.command == sl.Ask.NAME


class FakePoster:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str | None, int | None, str]] = []

    def reply_plan(self, message: Message, command: str | None) -> policy.PostPlan:
        return policy.plan_post(
            "channel",
            channel_id=message.channel_id,
            author_id=message.author.id,
            message_id=message.id,
            in_dm=False,
        )

    async def post(
        self,
        plan: policy.PostPlan,
        text: str,
        *,
        command: str | None,
        trigger_id: int | None,
        part: str | None = None,
    ) -> list[int]:
        self.posted.append((text, command, trigger_id, str(plan.target)))
        return [1]


async def test_a_message_is_answered_by_a_reply_to_it_and_a_failure_is_not_told() -> None:
    poster = FakePoster()
    trigger = Message(id=5, channel_id=10, author=USER, content="hi", timestamp="", guild_id=20)
    sink = ChannelReply(poster, trigger)
    await sink.acknowledge()
    await sink.post("hello")
    await sink.fail("Sorry.")
    assert poster.posted == [("hello", None, 5, "channel")]
    assert sink.surface() is None
