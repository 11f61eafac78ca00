"""Running a poll (SPEC 6): post it, seed reactions, wait, count the votes, post the result."""

from __future__ import annotations

import logging
from typing import Final, Protocol

import trio

from picortex.actors.clients import CurrentSettings, Poster, ReactionsRest
from picortex.actors.failures import error_line
from picortex.core import policy
from picortex.core import poll as pcore
from picortex.core.commands import StartPoll
from picortex.types import BotIdentity, EventSink, Message, Snowflake

logger = logging.getLogger(__name__)

REACTIONS_PAGE: Final = 100  # Discord's most users per Get Reactions call


class PollClients(Protocol):
    """What running a poll uses."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force."""
        ...

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

    @property
    def bot(self) -> BotIdentity:
        """Who the bot is (its own reactions are not votes)."""
        ...

    @property
    def rest(self) -> ReactionsRest:
        """Reactions on the poll's message."""
        ...

    @property
    def replies(self) -> Poster:
        """Posting the poll's result."""
        ...


class PollSink(Protocol):
    """Where a poll's question goes: the answer sink of the request that started it."""

    async def post_poll(self, text: str) -> Snowflake | None:
        """Post the question for all to see; its message's id (None: not posted, logged)."""
        ...


async def run_poll(clients: PollClients, trigger: Message, poll: StartPoll, sink: PollSink) -> None:
    """Run one poll in the trigger's channel; failures are logged, never raised.

    The question is the request's answer, through its sink (a message's reply in the
    channel, a slash command's response); the result, `poll_seconds` later, replies to it.
    """
    seconds = clients.settings().poll_seconds
    try:
        text = pcore.format_poll(poll.question, poll.options, seconds)
        poll_id = await sink.post_poll(text)
        if poll_id is None:
            return  # not posted: the sink logged why
        emojis = pcore.NUMBER_EMOJI[: len(poll.options)]
        for emoji in emojis:
            await clients.rest.add_reaction(trigger.channel_id, poll_id, emoji)
        clients.events.emit(
            "poll",
            action="start",
            message_id=poll_id,
            channel_id=trigger.channel_id,
            question=poll.question,
            options=list(poll.options),
            seconds=seconds,
        )
        await trio.sleep(seconds)
        reactions: dict[str, list[Snowflake]] = {}
        for emoji in emojis:
            reactions[emoji] = await _voters(clients, trigger.channel_id, poll_id, emoji)
        result = pcore.tally(reactions, poll.options, clients.bot.user_id)
        clients.events.emit(
            "poll",
            action="result",
            message_id=poll_id,
            channel_id=trigger.channel_id,
            votes=list(result.counts),
        )
        await clients.replies.post(
            policy.PostPlan("channel", trigger.channel_id, None, poll_id),
            pcore.format_result(poll.question, poll.options, result),
            command="poll",
            trigger_id=trigger.id,
            part="r",
        )
    except Exception as exc:
        message = error_line(exc)
        clients.events.emit("error", scope="poll", message_id=trigger.id, message=message)
        logger.warning("poll in channel %s failed: %s", trigger.channel_id, message)


async def _voters(
    clients: PollClients, channel_id: Snowflake, message_id: Snowflake, emoji: str
) -> list[Snowflake]:
    """Everyone who reacted with `emoji`, page by page (Discord lists 100 users at a time)."""
    voters: list[Snowflake] = []
    after: Snowflake | None = None
    while True:
        page = await clients.rest.get_reactions(channel_id, message_id, emoji, after=after)
        ids = [int(u["id"]) for u in page if "id" in u]
        voters.extend(ids)
        if len(page) < REACTIONS_PAGE or not ids:
            return voters
        after = max(ids)
