"""One request on its way through a channel: the `Delivery` and its `AnswerSink`.

The router builds one `Delivery` per request it hands to a channel, from the normalized
event: the request, the gateway `seq` it came with, when it arrived, and where its answer
goes. Nothing about the request travels beside it, and the channel actor answers every
request one way, through the sink: a message's reply is posted in its channel; a slash
command's goes to its interaction (picortex.actors.interactions.InteractionSink).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from picortex.actors.clients import ReplyPoster
from picortex.core import policy
from picortex.core.llm import LLMRequest
from picortex.types import Message, Snowflake

if TYPE_CHECKING:
    from picortex.actors.slash_request import SlashRequest
    from picortex.actors.stream_reply import AnswerSurface, Streamed


class AnswerSink(Protocol):
    """How an answer reaches the person who asked."""

    @property
    def command(self) -> str | None:
        """The command the answer is logged under (None: a free-chat answer)."""
        ...

    async def acknowledge(self) -> None:
        """Tell the person the answer is coming (a slash command's deferral; a message: nothing)."""
        ...

    async def post(self, text: str, *, command: str | None = None) -> None:
        """Post the answer, or `command`'s reply; raises when Discord refused it."""
        ...

    def surface(self) -> AnswerSurface | None:
        """Where a streamed answer grows (None: the reply policy's channel or DM)."""
        ...

    async def post_poll(self, text: str) -> Snowflake | None:
        """Post a poll's question where the whole chat sees it (anyone's reactions are its
        votes); the message's id, or None when it did not reach Discord (logged)."""
        ...

    async def fail(self, sentence: str) -> None:
        """No answer came: say why in one sentence where the person waits for one."""
        ...


@attrs.frozen
class ChannelReply:
    """A message's answer: a reply under the response policy, or where a persona's placement
    puts it (`post_at`, `stream_at`); its failure is logged, not told (the decision log and
    the failure record say why)."""

    replies: ReplyPoster
    trigger: Message
    command: str | None = None

    async def acknowledge(self) -> None:
        return None

    async def post(self, text: str, *, command: str | None = None) -> None:
        name = command or self.command
        plan = self.replies.reply_plan(self.trigger, name)
        await self.replies.post(plan, text, command=name, trigger_id=self.trigger.id)

    async def post_at(self, plan: policy.PostPlan, text: str) -> list[Snowflake]:
        """Post the answer where `plan` says (a persona's thread); the posted messages' ids."""
        return await self.replies.post(plan, text, command=None, trigger_id=self.trigger.id)

    async def stream_at(
        self, request: LLMRequest, plan: Callable[[], Awaitable[policy.PostPlan]]
    ) -> Streamed:
        """Stream the answer to `request` where `plan` says, once its first words come."""
        return await self.replies.stream_answer(request, plan, trigger_id=self.trigger.id)

    def surface(self) -> AnswerSurface | None:
        return None

    async def post_poll(self, text: str) -> Snowflake | None:
        # In the channel whatever the response policy says: a poll in a DM gets one voter.
        trigger = self.trigger
        plan = policy.plan_post(
            "channel",
            channel_id=trigger.channel_id,
            author_id=trigger.author.id,
            message_id=trigger.id,
            in_dm=trigger.is_dm,
        )
        posted = await self.replies.post(plan, text, command="poll", trigger_id=trigger.id)
        return posted[0] if posted else None

    async def fail(self, sentence: str) -> None:
        return None


@attrs.frozen
class Delivery:
    """One request handed to its channel's mailbox, built once by the router.

    Attributes:
        request: the message, or the slash command (or its autocomplete), made a request
            by the router (`picortex.actors.slash_request.slash_request`).
        seq: the gateway `seq` of the dispatch it came in (None: found by catch-up), kept
            with it while in hand, so a resumed session never skips it.
        arrived: when the router took it (`trio.current_time()`).
        sink: where its answer goes.
    """

    request: Message | SlashRequest
    seq: int | None
    arrived: float
    sink: AnswerSink

    @property
    def id(self) -> Snowflake:
        """The request's id (a message's or an interaction's)."""
        return self.request.id

    @property
    def message(self) -> Message:
        """The request as a message (a slash command as the message a typed one would be)."""
        request = self.request
        return request if isinstance(request, Message) else request.message
