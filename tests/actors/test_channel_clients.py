"""The channel actor against fakes of its narrow clients (no store, no REST, no model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import trio
import trio.testing

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.channel import ChannelActor
from picortex.actors.channel_roles import ChannelRoles
from picortex.actors.command_changes import Applied
from picortex.actors.delivery import ChannelReply, Delivery
from picortex.actors.interactions import REFUSAL
from picortex.actors.pipeline import ChannelRegistry, TriggerBook
from picortex.actors.slash_request import slash_request
from picortex.config import load_settings
from picortex.core import commands as cmds
from picortex.core import policy
from picortex.core import slash as sl
from picortex.types import (
    BotIdentity,
    Interaction,
    InteractionOption,
    InteractionType,
    Message,
    User,
)
from tests.actors.fakes import FakeSettings, FakeStore
from tests.helpers import RecordingSink

OWNER = User(id=1, username="owner")
STRANGER = User(id=2, username="stranger")
BOT_ID = 99
CHANNEL = 10


class FakeHandled:
    def finish(self, message_ids: Sequence[int], channel_id: int, guild_id: int | None) -> None:
        pass


class FakeReplies:
    """A reply poster that records what it was asked to post."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str | None, int | None]] = []

    def reply_target(self, command: str | None) -> policy.Target:
        return "channel"

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
        self.posted.append((text, command, trigger_id))
        return [1000 + len(self.posted)]


@attrs.define
class FakeClients:
    """Only what these paths of the channel actor touch; the rest is never called."""

    settings: FakeSettings
    home: Path
    events: RecordingSink = attrs.Factory(RecordingSink)
    store: FakeStore = attrs.Factory(FakeStore)
    bot: BotIdentity = attrs.Factory(lambda: BotIdentity(user_id=BOT_ID))
    registry: ChannelRegistry = attrs.Factory(ChannelRegistry)
    triggers: TriggerBook = attrs.Factory(TriggerBook)
    handled: FakeHandled = attrs.Factory(FakeHandled)
    answers_seen: AnswersSeen = attrs.Factory(AnswersSeen)
    faults: None = None
    spawn: Callable[..., None] | None = None
    fatal: None = None
    rest: object = None
    crash_drain_seconds: float = 1.0
    finished: list[int] = attrs.Factory(list)
    replies: FakeReplies = attrs.Factory(FakeReplies)
    changes: list[cmds.Change] = attrs.Factory(list)

    def finish(self, message: Message | Interaction) -> None:
        self.finished.append(message.id)

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: int | None, now: float
    ) -> Applied:
        self.changes.extend(changes)
        return Applied(poll=next((c for c in changes if isinstance(c, cmds.StartPoll)), None))


class FakeInbox:
    def __init__(self, messages: list[Message | Delivery], replies: FakeReplies) -> None:
        self.messages = messages
        self.replies = replies
        self.handled = 0

    async def receive(self) -> Delivery:
        if not self.messages:
            await trio.sleep_forever()
        return self.receive_nowait()

    def receive_nowait(self) -> Delivery:
        message = self.messages.pop(0)
        if isinstance(message, Delivery):
            return message
        return Delivery(message, None, trio.current_time(), ChannelReply(self.replies, message))

    def done(self) -> None:
        self.handled += 1

    @property
    def depth(self) -> int:
        return len(self.messages)


def message(i: int, author: User, content: str) -> Message:
    return Message(
        id=i,
        channel_id=CHANNEL,
        author=author,
        content=content,
        timestamp="2024-05-01T12:00:00+00:00",
        guild_id=20,
    )


def roles(fake: FakeClients) -> ChannelRoles:
    """Every role the channel actor takes, played by the one fake."""
    return ChannelRoles(fake, fake, fake, fake, fake, fake, fake, fake)


def clients(tmp_path: Path) -> FakeClients:
    env = {"PICORTEX_HOME": str(tmp_path), "PICORTEX_OWNER_ID": str(OWNER.id)}
    return FakeClients(settings=FakeSettings(load_settings(env)), home=tmp_path)


async def run_until_handled(fake: FakeClients, messages: list[Message | Delivery]) -> None:
    inbox = FakeInbox(list(messages), fake.replies)
    actor = ChannelActor(CHANNEL, inbox, roles(fake))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        while inbox.handled < len(messages) or len(fake.finished) < len(messages):
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_a_stranger_is_logged_as_ignored_and_nothing_is_kept_or_posted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    await run_until_handled(fake, [message(5, STRANGER, f"<@{BOT_ID}> hello")])
    decisions = fake.events.of("decision")
    assert [(d["message_id"], d["outcome"], d["reason"]) for d in decisions] == [
        (5, "ignore", "untrusted author: never answered")
    ]
    assert fake.finished == [5]
    assert fake.store.kept == []
    assert fake.replies.posted == []


async def test_the_owners_command_is_kept_logged_and_answered_through_the_poster(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    await run_until_handled(fake, [message(6, OWNER, f"<@{BOT_ID}> !s help")])
    assert fake.store.kept == [6]
    [command] = fake.events.of("command")
    assert (command["command"], command["requester"]) == ("help", OWNER.id)
    [(text, name, trigger_id)] = fake.replies.posted
    assert (name, trigger_id) == ("help", 6)
    assert "!s" in text
    assert fake.finished == [6]


class FakeSlashSink:
    """An interaction's sink that records what the channel answered through it."""

    command = "ask"

    def __init__(self) -> None:
        self.responses: list[tuple[str, bool, str | None, bool]] = []
        self.acknowledged = 0

    async def acknowledge(self) -> None:
        self.acknowledged += 1

    async def post(self, text: str) -> None:
        raise AssertionError("no model answer in these tests")

    def surface(self) -> None:
        return None

    async def fail(self, sentence: str) -> None:
        raise AssertionError("no model answer in these tests")

    async def respond(
        self, text: str, *, ephemeral: bool, command: str | None, refused: bool = False
    ) -> bool:
        self.responses.append((text, ephemeral, command, refused))
        return True

    async def autocomplete(self, choices: list[dict[str, str]]) -> None:
        raise AssertionError("not an autocomplete")

    async def post_poll(self, text: str) -> int | None:
        raise AssertionError("no poll in these tests")


def slash(i: int, user: User, subcommand: str) -> Interaction:
    return Interaction(
        id=i,
        application_id=3,
        type=InteractionType.APPLICATION_COMMAND,
        token="secret-token",
        channel_id=CHANNEL,
        user=user,
        guild_id=20,
        command_name="picortex",
        options=(InteractionOption(subcommand, sl.SUB_COMMAND),),
    )


async def test_a_slash_command_is_answered_through_its_deliverys_sink(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    sink = FakeSlashSink()
    delivery = Delivery(slash_request(slash(7, OWNER, "help")), 1234, 0.0, sink)
    await run_until_handled(fake, [delivery])
    await trio.testing.wait_all_tasks_blocked()
    [(text, ephemeral, command, refused)] = sink.responses
    assert (ephemeral, command, refused) == (False, "help", False)
    assert text.startswith("Commands")
    assert fake.replies.posted == []  # nothing went to the channel beside the sink
    assert fake.finished == [7]


async def test_a_strangers_slash_command_is_refused_privately_through_its_sink(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    sink = FakeSlashSink()
    await run_until_handled(
        fake, [Delivery(slash_request(slash(8, STRANGER, "help")), None, 0.0, sink)]
    )
    await trio.testing.wait_all_tasks_blocked()
    assert sink.responses == [(REFUSAL, True, "help", True)]
    [decision] = fake.events.of("decision")
    assert decision["reason"] == "slash command from an untrusted user: refused privately"


class RecordingAnswers:
    """A message's answer sink that records what was posted through it."""

    command = None

    def __init__(self) -> None:
        self.posted: list[tuple[str, str | None]] = []
        self.polls: list[str] = []

    async def acknowledge(self) -> None:
        return None

    async def post(self, text: str, *, command: str | None = None) -> None:
        self.posted.append((text, command))

    def surface(self) -> None:
        return None

    async def post_poll(self, text: str) -> int | None:
        self.polls.append(text)
        return 500

    async def fail(self, sentence: str) -> None:
        return None


async def test_a_typed_commands_reply_leaves_through_its_deliverys_sink(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    sink = RecordingAnswers()
    trigger = message(9, OWNER, f"<@{BOT_ID}> !s help")
    await run_until_handled(fake, [Delivery(trigger, 77, 0.0, sink)])
    [(text, command)] = sink.posted
    assert command == "help"
    assert "!s" in text
    assert fake.replies.posted == []  # the channel posts no other way
    assert fake.finished == [9]


class PollRest:
    """Reactions on a poll: the bot's seeds recorded, one vote for each option."""

    def __init__(self) -> None:
        self.seeded: list[tuple[int, str]] = []

    async def add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        self.seeded.append((message_id, emoji))

    async def get_reactions(
        self, channel_id: int, message_id: int, emoji: str, *, after: int | None = None
    ) -> list[dict[str, object]]:
        return [{"id": str(OWNER.id)}]


async def test_a_typed_polls_question_leaves_through_its_deliverys_sink(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = clients(tmp_path)
    fake.settings.settings = attrs.evolve(fake.settings.settings, poll_enabled=True)
    rest = PollRest()
    sink = RecordingAnswers()
    trigger = message(11, OWNER, f'<@{BOT_ID}> !s poll "Lunch?" Pizza // Soup')
    async with trio.open_nursery() as background:
        fake.spawn = background.start_soon
        fake.rest = rest
        await run_until_handled(fake, [Delivery(trigger, 78, 0.0, sink)])
    [question] = sink.polls
    assert "Lunch?" in question
    assert sink.posted == []
    assert [message_id for message_id, _ in rest.seeded] == [500, 500]
    # The result, `poll_seconds` later, replies to the poll's message through the poster.
    [(result, command, trigger_id)] = fake.replies.posted
    assert (command, trigger_id) == ("poll", 11)
    assert "Lunch?" in result
