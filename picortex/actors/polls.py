"""Running a poll (SPEC 6): post it, seed reactions, wait, count the votes, post the result."""

from __future__ import annotations

import logging

import trio

from picortex.actors.pipeline import Pipeline, failure_text
from picortex.core import policy
from picortex.core import poll as pcore
from picortex.core.commands import StartPoll
from picortex.types import Message, Snowflake

logger = logging.getLogger(__name__)


async def run_poll(pipe: Pipeline, trigger: Message, poll: StartPoll) -> None:
    """Run one poll in the trigger's channel; failures are logged, never raised."""
    seconds = pipe.settings().poll_seconds
    plan = policy.plan_post(
        "channel",
        channel_id=trigger.channel_id,
        author_id=trigger.author.id,
        message_id=trigger.id,
        in_dm=trigger.is_dm,
    )
    try:
        text = pcore.format_poll(poll.question, poll.options, seconds)
        posted = await pipe.post(plan, text, command="poll", trigger_id=trigger.id)
        poll_id = posted[0]
        emojis = pcore.NUMBER_EMOJI[: len(poll.options)]
        for emoji in emojis:
            await pipe.rest.add_reaction(trigger.channel_id, poll_id, emoji)
        pipe.events.emit(
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
            users = await pipe.rest.get_reactions(trigger.channel_id, poll_id, emoji)
            reactions[emoji] = [int(u["id"]) for u in users if "id" in u]
        result = pcore.tally(reactions, poll.options, pipe.bot.user_id)
        pipe.events.emit(
            "poll",
            action="result",
            message_id=poll_id,
            channel_id=trigger.channel_id,
            votes=list(result.counts),
        )
        await pipe.post(
            policy.PostPlan("channel", trigger.channel_id, None, poll_id),
            pcore.format_result(poll.question, poll.options, result),
            command="poll",
            trigger_id=trigger.id,
        )
    except Exception as exc:
        message = failure_text(exc)[0]
        pipe.events.emit("error", scope="poll", message_id=trigger.id, message=message)
        logger.warning("poll in channel %s failed: %s", trigger.channel_id, message)
