"""Posting replies under the response policy (SPEC 10): split to Discord's limit, nonced,
DMs opened once, the typing indicator shown, answers streamed as they are written (SPEC 16).
Each post is logged as a `reply` event.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol

import attrs
import trio

from picortex.actors.answer_gate import AnswerGate
from picortex.actors.clients import CurrentSettings, ModelClient
from picortex.actors.failures import error_line
from picortex.actors.stream_reply import (
    AnswerSurface,
    ChannelSurface,
    Streamed,
    StreamedReply,
    reply_nonce,
)
from picortex.core import policy
from picortex.core.llm import LLMRequest, LLMResult
from picortex.core.split import split_reply
from picortex.core.stream import with_cut_notice
from picortex.discord.fence import LeaseEnded
from picortex.errors import FatalDiscordError
from picortex.types import EventSink, Message, Snowflake

logger = logging.getLogger(__name__)

# Discord shows a typing indicator for 10 s; renew it a little sooner.
TYPING_RENEW_SECONDS: Final = 8.0
# A ready answer waits at most this long for its first typing request (sent when generation
# started, so normally long done): the indicator comes before the reply, never much later.
TYPING_FIRST_WAIT_SECONDS: Final = 0.5
# A held indicator (`typing(hold=...)`) waits at most this long for the model request to be
# written before its first request goes anyway: a request that takes long to leave (a new
# connection's handshake) still shows the indicator about at once.
TYPING_HOLD_SECONDS: Final = 0.25
# An indicator's answer from Discord (an empty 204) is read once the answer's block has
# ended, or this long after the request went out: handling it costs about what sending a
# reply does, and an instant answer's post should not queue behind it. Longer than an
# instant answer takes; far shorter than the 8 s renewal.
TYPING_READ_DEFER_SECONDS: Final = 0.1


class PostingRest(Protocol):
    """The REST calls replies make (picortex.discord.rest.RestClient)."""

    async def create_message(
        self,
        channel_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        allowed_mentions: dict[str, Any] | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]: ...

    async def edit_message(
        self,
        channel_id: int,
        message_id: int,
        content: str,
        *,
        allowed_mentions: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    async def create_dm(self, user_id: int) -> dict[str, Any]: ...

    def expect(self, count: int) -> None: ...

    async def trigger_typing(
        self,
        channel_id: int,
        *,
        on_sent: Callable[[], None] | None = None,
        read_after: Callable[[], Awaitable[None]] | None = None,
    ) -> None: ...


class Replies:
    """The reply poster the app builds once (`picortex.actors.clients.ReplyPoster`).

    Args:
        settings: the settings in force (the response policy, read per reply).
        rest: Discord's message routes.
        llm: the model, for streamed answers.
        events: the action log.
        fatal: where a refused token is reported.
    """

    def __init__(
        self,
        settings: CurrentSettings,
        rest: PostingRest,
        llm: ModelClient,
        events: EventSink,
        *,
        fatal: Callable[[FatalDiscordError], None],
    ) -> None:
        self.settings = settings
        self.rest = rest
        self.llm = llm
        self.events = events
        # DM channels opened so far, by user (the panel lists them too).
        self.dm_channels: dict[Snowflake, Snowflake] = {}
        self._fatal = fatal
        # Answers made at once, the others in line (`answer_gate`).
        self.gate = AnswerGate()

    def reply_target(self, command: str | None) -> policy.Target:
        """Where a reply goes under the current response policy (None: a free-chat answer)."""
        rp = self.settings().response_policy
        return policy.decide_target(command, rp.default_mode, rp.sensitive_commands, rp.overrides)

    def reply_plan(self, message: Message, command: str | None) -> policy.PostPlan:
        """How to post the reply to `message` under the current response policy."""
        return policy.plan_post(
            self.reply_target(command),
            channel_id=message.channel_id,
            author_id=message.author.id,
            message_id=message.id,
            in_dm=message.is_dm,
        )

    @asynccontextmanager
    async def typing(
        self,
        channel_id: Snowflake,
        enabled: bool = True,
        *,
        spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None,
        hold: trio.Event | None = None,
    ) -> AsyncIterator[trio.Event]:
        """Show the typing indicator in `channel_id` while the block runs, from its start.

        Yields an event set once the first typing request is on its way to Discord (or
        failed), so a ready answer can make sure the indicator goes first; typing never
        fails an answer. With `spawn` (a task starter that outlives the block) a typing
        request still in flight when the block ends finishes in the background instead of
        being cut off, so its connection stays open for the next request. With `hold`, the
        first typing request waits until `hold` is set (the answer's model request is
        written: the indicator then costs a fast answer no time), at most
        TYPING_HOLD_SECONDS; the block's end sets `hold` too. With `spawn`, Discord's
        answer to each typing request is read once the block has ended, at most
        TYPING_READ_DEFER_SECONDS after it was sent.
        """
        shown = trio.Event()
        if not enabled:
            shown.set()
            yield shown
            return
        stop = trio.Event()

        async def after_answer() -> None:
            with trio.move_on_after(TYPING_READ_DEFER_SECONDS):
                await stop.wait()

        # Only a task that outlives the block may leave its answer unread that long: one
        # cancelled at the block's end would close the connection it holds.
        read_after = after_answer if spawn is not None else None

        async def keep_typing() -> None:
            try:
                if hold is not None and not hold.is_set():
                    with trio.move_on_after(TYPING_HOLD_SECONDS):
                        await hold.wait()
                while not stop.is_set():
                    try:
                        await self.rest.trigger_typing(
                            channel_id, on_sent=shown.set, read_after=read_after
                        )
                    except Exception as exc:  # typing is cosmetic; never fail an answer on it
                        logger.debug("typing indicator failed: %s", exc)
                        return
                    shown.set()
                    with trio.move_on_after(TYPING_RENEW_SECONDS):
                        await stop.wait()
            finally:
                shown.set()

        if spawn is not None:
            spawn(keep_typing)
            try:
                yield shown
            finally:
                stop.set()
                if hold is not None:
                    hold.set()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_typing)
            try:
                yield shown
            finally:
                nursery.cancel_scope.cancel()

    def expect_requests(self, count: int) -> None:
        """An answer's `count` requests go in a moment (its history read, typing indicator,
        reply): their slots of the global limit are asked for now, so that none waits a round
        trip to a cluster's shared table when it goes (one process has nothing to ask)."""
        self.rest.expect(count)

    async def dm_channel(self, user_id: Snowflake) -> Snowflake:
        """The DM channel with a user (opened once, then remembered)."""
        known = self.dm_channels.get(user_id)
        if known is not None:
            return known
        data = await self.rest.create_dm(user_id)
        channel_id = int(data["id"])
        self.dm_channels[user_id] = channel_id
        return channel_id

    async def post(
        self,
        plan: policy.PostPlan,
        text: str,
        *,
        command: str | None,
        trigger_id: Snowflake | None,
        part: str | None = None,
    ) -> list[Snowflake]:
        """Post `text` (split to Discord's limit) as the plan says; log a `reply` event.

        A DM that cannot be delivered is logged and never falls back to the channel.
        Returns the ids of the posted messages; raises when the first post fails. `part`
        names which of a trigger's posts this is when one trigger posts more than once
        (a poll's question, then its result); see `reply_nonce`.
        """
        chunks = split_reply(text) or ["(empty answer)"]
        posted: list[Snowflake] = []
        target_channel: Snowflake | None = plan.channel_id
        # No overall deadline: REST bounds each request and its 5xx retries, and waits out
        # 429s however many come (SPEC 4), so a rate-limited answer is late, never dropped.
        try:
            if plan.dm_user_id is not None:
                target_channel = await self.dm_channel(plan.dm_user_id)
            assert target_channel is not None
            for index, chunk in enumerate(chunks):
                data = await self.rest.create_message(
                    target_channel,
                    chunk,
                    reply_to=plan.reply_to if index == 0 else None,
                    allowed_mentions=policy.allowed_mentions(ping_users=False),
                    **reply_nonce(trigger_id, part or ("a" if command is None else "c"), index),
                )
                posted.append(int(data["id"]))
        except Exception as exc:
            self._failed(
                exc,
                command=command,
                mode=plan.target,
                target=target_channel or plan.dm_user_id,
                trigger_id=trigger_id,
                parts=len(posted),
            )
            raise
        self.events.emit(
            "reply",
            command=command,
            mode=plan.target,
            target=target_channel,
            trigger_id=trigger_id,
            result="posted",
            message_ids=posted,
            parts=len(posted),
            chars=len(text),
        )
        return posted

    def _failed(self, exc: BaseException, **fields: object) -> None:
        """Log a reply that could not be posted; a fatal Discord error stops the bot too."""
        if isinstance(exc, FatalDiscordError):
            self._fatal(exc)
        where = {k: fields.pop(k) for k in ("command", "mode", "target", "trigger_id")}
        # Not sent: its shard's lease ended here (SPEC 17); the shard's next holder answers.
        result = "lease_ended" if isinstance(exc, LeaseEnded) else "failed"
        self.events.emit("reply", **where, result=result, error=error_line(exc), **fields)

    async def resolve_plan(self, plan: policy.PostPlan) -> policy.PostPlan:
        """The plan with its DM channel opened, when it goes to a DM."""
        if plan.dm_user_id is None:
            return plan
        channel_id = await self.dm_channel(plan.dm_user_id)
        return attrs.evolve(plan, channel_id=channel_id)

    async def stream_answer(
        self,
        request: LLMRequest,
        plan: Callable[[], Awaitable[policy.PostPlan]],
        *,
        trigger_id: Snowflake,
        before_first_post: Callable[[], Awaitable[bool]] | None = None,
        surface: AnswerSurface | None = None,
        on_sent: Callable[[], None] | None = None,
        command: str | None = None,
    ) -> Streamed:
        """Make the model call streamed and show the answer as it is written (SPEC 16).

        `plan` is awaited at the first post (where the reply goes), unless `surface` says
        where the answer is written instead (a slash `ask`). The call is one
        request, never retried; a stream cut midway leaves what arrived plus one line
        saying so. A reply that could not be posted cancels the call. Logs the `reply`
        event, naming `command` when the answer is a command's (a slash `ask`); the caller
        records failures. `on_sent` is the call's (`LLMActor.complete`).
        """
        if surface is None:
            # No deadline of its own: REST bounds each request and waits out 429s however many
            # come (SPEC 4). The trigger names the nonces, so a reply posted before a kill is
            # found again (and finished) when the trigger is handled again after the restart.
            surface = ChannelSurface(self.rest, plan, timeout=math.inf, trigger_id=trigger_id)
        reply = StreamedReply(surface, before_first_post=before_first_post)
        result: LLMResult | None = None
        with trio.CancelScope() as call_scope:

            async def write() -> None:
                await reply.run()
                if reply.failure is not None or reply.abandoned:
                    call_scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)

                # The reply is settled on the whole answer as soon as the stream ends, while
                # the call is still closed, settled and logged.
                def end(text: str) -> Awaitable[None]:
                    reply.finish(text)
                    return reply.handed_over()

                result = await self.llm.complete(
                    request, on_text=reply.feed, on_sent=on_sent, on_end=end
                )
                if reply.finished:
                    pass  # whole at message_stop, whatever came after it
                elif result.ok:
                    reply.finish(result.text)
                elif reply.text:
                    reply.finish(with_cut_notice(reply.text))
                else:
                    reply.stop()
        failure = reply.failure
        if failure is not None:
            self._failed(
                failure,
                command=command,
                mode=surface.target,
                target=surface.channel_id,
                trigger_id=trigger_id,
                parts=len(surface.message_ids),
                streamed=True,
            )
        elif reply.started:
            self.events.emit(
                "reply",
                command=command,
                mode=surface.target,
                target=surface.channel_id,
                trigger_id=trigger_id,
                result="posted" if result is not None and result.ok else "cut",
                message_ids=surface.message_ids,
                parts=len(surface.message_ids),
                chars=len(reply.shown_text),
                streamed=True,
                edits=reply.edits,
            )
        return Streamed(result, reply, surface)
