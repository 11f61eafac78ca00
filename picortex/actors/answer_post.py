"""An answer's way out of the channel actor: streamed into its reply (SPEC 16), a failed post
recorded (SPEC 9), or left to its shard's next holder when this process no longer holds it
(SPEC 17)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from picortex.actors import answer_prompt
from picortex.actors.answer_state import Generation
from picortex.actors.channel_clients import ChannelClients, ChannelRecords
from picortex.actors.command_run import decision_event
from picortex.actors.failures import failure_text
from picortex.actors.replies import TYPING_FIRST_WAIT_SECONDS
from picortex.core.budget import workspace_id
from picortex.core.llm import LLMRequest
from picortex.discord.fence import LEFT_TO_NEXT_HOLDER, LeaseEnded
from picortex.discord.http import task_fence
from picortex.types import Message, Snowflake


def left_to_next_holder(
    records: ChannelRecords, msg: Message, message_ids: Sequence[Snowflake]
) -> None:
    """The request's shard is no longer held (SPEC 17): say so, and leave its messages
    unmarked (this task's fence is stopped) for the process that holds the shard now."""
    fence = task_fence()
    if fence is not None:
        fence.stopped = True
    decision_event(records.events, msg, "skip", LEFT_TO_NEXT_HOLDER)
    records.handled.finish(message_ids, msg.channel_id, msg.guild_id)


def post_failed(
    records: ChannelRecords, trigger: Message, exc: BaseException, persona: str | None
) -> None:
    """A post that failed: an error row (SPEC 9); none for a post refused as its shard's
    lease ended (not a failure: the shard's next holder answers)."""
    if isinstance(exc, LeaseEnded):
        return
    message, trace = failure_text(exc)
    records.failures.record(
        stage="post",
        workspace=workspace_id(trigger.guild_id),
        persona=persona,
        signal_id=trigger.id,
        error=message,
        stack_trace=trace,
    )


async def stream_answer(
    clients: ChannelClients,
    gen: Generation,
    request: LLMRequest,
    *,
    claim: Callable[[Generation], Awaitable[bool]],
    typing_shown: trio.Event,
    on_sent: Callable[[], None],
    post_notice: Callable[[str], Awaitable[None]],
) -> None:
    """The answer streamed into its reply (SPEC 16). `claim` waits for the reply's turn and
    says whether it is still to be posted (not superseded by a follow-up)."""
    trigger = gen.trigger
    replies = clients.posting.replies
    plan = replies.reply_plan(trigger, None)

    async def before_first_post() -> bool:
        if not await claim(gen):
            return False
        if not typing_shown.is_set():
            with trio.move_on_after(TYPING_FIRST_WAIT_SECONDS):
                await typing_shown.wait()
        return True

    streamed = await replies.stream_answer(
        request,
        lambda: replies.resolve_plan(plan),
        trigger_id=trigger.id,
        before_first_post=before_first_post,
        # A slash `ask`'s answer grows in the deferred response (SPEC 15).
        surface=gen.sink.surface(),
        on_sent=on_sent,
        command=gen.sink.command,
    )
    result = streamed.result
    if streamed.reply.failure is not None:
        post_failed(clients.records, trigger, streamed.reply.failure, None)
    elif result is not None and not result.ok:
        answer_prompt.log_no_answer(clients.records, trigger, result)
        if result.notice and not streamed.reply.started:
            # A user over their own limit is told once per period, politely.
            await post_notice(result.notice)
