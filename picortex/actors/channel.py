"""The per-channel mailbox actor: SPEC section 5's pipeline for one channel, in arrival order.

Decisions happen one message at a time, in arrival order, and never wait for an answer: each
answer is generated in a child task (a follow-up from the same author cancels it and restarts
with the merged request), and replies keep the channel's order because each answer or command
reply waits for the previous one's post just before posting. A `trigger` event is written at
the decision; a `context` event (context_count) once the answer's context is built.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Final

import attrs
import trio

from picortex.actors import answer_post, answer_prompt, chats, persona_answer, slash_dispatch
from picortex.actors.answer_gate import Place
from picortex.actors.answer_state import Generation, ReplySlot
from picortex.actors.channel_clients import ChannelClients, Inbox
from picortex.actors.classify import classify
from picortex.actors.command_run import (
    decision_event,
    execute,
    requester_tier,
    trigger_event,
)
from picortex.actors.delivery import AnswerSink, ChannelReply, Delivery
from picortex.actors.failures import error_line
from picortex.actors.replies import TYPING_FIRST_WAIT_SECONDS
from picortex.actors.shard_fence import ShardFence
from picortex.actors.slash_request import SlashRequest
from picortex.core import commands as cmds
from picortex.core import continuation as cont
from picortex.core import personas as pcore
from picortex.core.attention import decide_attention
from picortex.core.merged import held_request
from picortex.core.triggerlog import entry_from_message
from picortex.core.trust import Tier, should_ignore
from picortex.discord.http import fenced
from picortex.runtime.groups import lone_error
from picortex.types import Message, Snowflake

logger = logging.getLogger(__name__)

# A channel actor with nothing to do for this long exits; the next message restarts it.
IDLE_EXIT_SECONDS: Final = 300.0
# How far back in the channel's cache a replied-to message is sought when Discord did not
# include it (an older one is not taken for the bot's).
REPLY_SCAN: Final = 200
# Messages handled per wake-up at most when the mailbox is deep: a backlog is drained
# without an idle timer and a scheduler round per message, yet other actors still get turns.
DRAIN_BATCH: Final = 32


class ChannelActor:
    """One channel's pipeline. State is in memory only and rebuilt from the store.

    Args:
        channel_id: the channel.
        inbox: its mailbox.
        clients: its roles, each built whole by the app (`channel_roles`).
        windows: told each new state of the channel's open requests (immutable values: the
            router decides a trusted author's chatter inline when it cannot continue one).
        fence: in a cluster, the shards this process holds (SPEC 17): a request of a shard
            no longer held is left to its next holder, and its answer in progress stopped.
    """

    def __init__(
        self,
        channel_id: Snowflake,
        inbox: Inbox,
        clients: ChannelClients,
        *,
        windows: Callable[[cont.ContinuationState], None] = lambda state: None,
        fence: ShardFence | None = None,
    ) -> None:
        self.channel_id = channel_id
        self._fence = fence
        self._inbox = inbox
        self._clients = clients
        self._publish_windows = windows
        self._cont = cont.ContinuationState(clients.chat.settings().continuation_seconds)
        self._inflight: set[Generation] = set()
        self._current: dict[Snowflake, Generation] = {}  # the live answer, by request id
        self._last: trio.Event | None = None  # the latest slot's `done`
        self._tasks = 0
        self._nursery: trio.Nursery | None = None
        self._idle = trio.Event()  # set while no child task runs
        self._idle.set()
        # Set while handling a message whose decision becomes final later (an answer or a
        # command reply to post): it is marked handled then, not when the mailbox moves on.
        self._deferred = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Handle messages until idle for IDLE_EXIT_SECONDS with nothing queued."""
        # A restart begins a new reply order: the tasks of a crashed run are all gone.
        self._last = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    delivery: Delivery | None = None
                    with trio.move_on_after(IDLE_EXIT_SECONDS):
                        delivery = await self._inbox.receive()
                    if delivery is None:
                        if self._tasks == 0 and self._inbox.depth == 0:
                            break
                        continue
                    for _ in range(DRAIN_BATCH):
                        if self._fence is None:
                            await self._decide(delivery, nursery)
                        else:
                            # Its posts (and its tasks' posts) pass its shard's fence.
                            with fenced(self._fence.request(delivery.message.guild_id)) as fence:
                                if fence.allows():
                                    await self._decide(delivery, nursery)
                                else:
                                    msg = delivery.message
                                    answer_post.left_to_next_holder(
                                        self._clients.records, msg, (msg.id,)
                                    )
                        self._inbox.done()
                        if not self._inbox.depth:
                            break
                        delivery = self._inbox.receive_nowait()
        except BaseExceptionGroup as group:
            # Surface a lone crash as itself, so the supervisor logs what actually failed.
            lone = lone_error(group)
            if lone is None:
                raise
            raise lone from None

    async def _decide(self, delivery: Delivery, nursery: trio.Nursery) -> None:
        """Handle one message; final now unless its answer or reply comes later."""
        self._deferred = False
        try:
            await self._handle(delivery, nursery)
        except Exception:
            # Only the message in hand is lost (SPEC 12): it is not retried, even after a
            # restart; answers to earlier messages finish first, or are logged as abandoned.
            self._clients.records.finish(delivery.message)
            await self._drain()
            raise
        if not self._deferred:
            # Decided here and now (skipped, refused, context): final.
            self._clients.records.finish(delivery.message)

    @property
    def _cont(self) -> cont.ContinuationState:
        """The channel's open requests (SPEC 5 step 4)."""
        return self._windows

    @_cont.setter
    def _cont(self, state: cont.ContinuationState) -> None:
        self._windows = state
        self._publish_windows(state)

    async def _drain(self) -> None:
        with trio.move_on_after(self._clients.model.crash_drain_seconds):
            await self._idle.wait()
        for gen in self._inflight:
            self._clients.records.events.emit(
                "error",
                scope="generate",
                message_id=gen.trigger.id,
                channel_id=gen.trigger.channel_id,
                message="abandoned: channel actor crashed",
            )
            # Logged as failed, so final: a crash is never retried (SPEC 12).
            self._clients.records.handled.finish(
                gen.request.message_ids, gen.trigger.channel_id, gen.trigger.guild_id
            )

    def _spawn(self, nursery: trio.Nursery, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` as a child task, counted so the actor neither idles out nor drains early."""
        if self._tasks == 0:
            self._idle = trio.Event()
        self._tasks += 1

        async def task() -> None:
            try:
                await fn()
            finally:
                self._tasks -= 1
                if self._tasks == 0:
                    self._idle.set()

        nursery.start_soon(task)

    def _spawn_background(self, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` in the actor's nursery (it may outlive the answer that started it)."""
        assert self._nursery is not None, "only called while the actor runs"
        self._spawn(self._nursery, fn)

    def spawn(self, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` as one of the channel's tasks (a slash command's answer)."""
        self._spawn_background(fn)

    def answer(self, request: cont.Request, trigger: Message, sink: AnswerSink) -> None:
        """Generate the answer to a slash `ask` in the channel's reply order."""
        assert self._nursery is not None, "only called while the actor runs"
        self._start(
            request, trigger, self._new_slot(), sink, self._nursery, typing=False, slash=True
        )

    def _new_slot(self) -> ReplySlot:
        slot = ReplySlot(self._last)
        self._last = slot.done
        return slot

    # ----- one message ---------------------------------------------------------------------

    async def _handle(self, delivery: Delivery, nursery: trio.Nursery) -> None:
        msg = delivery.request
        if isinstance(msg, SlashRequest):
            assert isinstance(delivery.sink, slash_dispatch.SlashSink), "an interaction's sink"
            await slash_dispatch.dispatch(self._clients, self, msg, delivery.sink)
            return
        sink = delivery.sink
        clients = self._clients
        settings = clients.chat.settings.refresh()
        bot_id = clients.chat.bot.user_id
        ignored = should_ignore(msg, bot_id)
        if ignored is not None:
            if ignored != "own message":
                decision_event(self._clients.records.events, msg, "ignore", ignored)
            return
        if clients.chat.faults is not None:
            clients.chat.faults.check("mailbox", msg.content)
        author = msg.author.id
        tier = requester_tier(clients.chat, author, msg.member_roles)
        command_text = cmds.detect_command(
            msg,
            wakeword=settings.wakeword,
            bot_user_id=bot_id,
            group_dm=clients.chat.registry.is_group_dm(msg.channel_id),
        )
        self._cont = attrs.evolve(self._cont, seconds=settings.continuation_seconds)
        text = cmds.strip_mention(msg.text, bot_id)

        if tier is None:
            # `forget me` is open to anyone whose words may be stored (someone taken off
            # the trust list, say): it costs no model call and deletes only their own.
            command = cmds.parse_command(command_text) if command_text is not None else None
            if command is not None and cmds.forgets_only_requester(command, author):
                await self._command(msg, command_text or "", tier, sink, nursery, command=command)
                return
            what = "command from an untrusted author" if command_text is not None else None
            reason = what or "untrusted author: never answered"
            decision_event(clients.records.events, msg, "ignore", reason)
            return
        # Only trusted authors' words are kept for recall (SPEC 8): strangers cost no write.
        chats.remember(clients.chat.store, msg, msg.text)

        if command_text is None:
            window = cont.window_for(self._cont, msg.channel_id, msg.author.id, msg.sent_at)
            answers = clients.records.answers_seen
            if (
                window is not None
                and window.generating
                and answers.answered_before(window.request.parent_id, msg.id)
            ):
                # A request replayed after a restart, answered before the kill: what was sent
                # after that answer is not part of it (SPEC 5.4, on Discord's clock).
                self._cont = cont.on_answered(self._cont, window.request)
                window = cont.window_for(self._cont, msg.channel_id, msg.author.id, msg.sent_at)
            # Once the answer is posted, a message that addresses the bot again (a mention, a
            # reply to it, a DM) is a new request; any other is context for the next one.
            addresses_bot = msg.is_dm or self._calls_bot(msg)
            if window is not None and not (not window.generating and addresses_bot):
                self._cont, outcome = cont.on_message(self._cont, msg, True, text=text)
                if not isinstance(outcome, cont.NotInWindow):
                    persona_answer.observe(self._clients.personas, msg, text)
                    await self._follow_up(msg, outcome, sink, nursery)
                    return

        if command_text is not None:
            await self._command(msg, command_text, tier, sink, nursery)
            return
        await self._attend(msg, text, tier, sink, nursery)

    # ----- commands (SPEC 6) -----------------------------------------------------------------

    async def _command(
        self,
        msg: Message,
        command_text: str,
        tier: Tier | None,
        sink: AnswerSink,
        nursery: trio.Nursery,
        *,
        command: cmds.Command | None = None,
    ) -> None:
        clients = self._clients
        if command is None:
            command = cmds.parse_command(command_text)
        name, reply, poll_to_start, _ = await execute(clients, msg, command, command_text, tier)
        if poll_to_start is not None:
            from picortex.actors.polls import run_poll

            clients.posting.spawn(run_poll, clients.polls, msg, poll_to_start, sink)
            return
        slot = self._new_slot()

        async def post_reply() -> None:
            try:
                await slot.turn()
                await sink.post(reply, command=name)
            except Exception as exc:
                logger.warning("reply to %s command failed: %s", name, error_line(exc))
            finally:
                slot.done.set()
            # Posted or failed (and logged): final. Cancelled by a shutdown: handled again.
            clients.records.finish(msg)

        self._deferred = True
        self._spawn(nursery, post_reply)

    # ----- attention (SPEC 5 step 5) ----------------------------------------------------------

    async def _attend(
        self, msg: Message, text: str, tier: Tier, sink: AnswerSink, nursery: trio.Nursery
    ) -> None:
        clients = self._clients
        bot_id = clients.chat.bot.user_id or 0
        settings = clients.chat.settings()
        choice = chats.mode_choice(
            clients.chat.store, clients.chat.registry, msg, settings.attention, settings.access
        )
        mode = choice.mode
        persona_answer.observe(clients.personas, msg, text)
        decision = decide_attention(
            msg,
            bot_user_id=bot_id,
            owner_id=settings.owner_id,
            mode=mode,
            is_dm=msg.is_dm,
            replied_to_bot=self._replied_to_bot(msg),
        )
        if choice.why:
            decision = attrs.evolve(decision, reason=f"{decision.reason} ({choice.why})")
        if decision.outcome == "discriminate":
            decision = await classify(clients, msg, decision, self._spawn_background)
        # The discriminator's confidence, when it gave one, goes into the event (SPEC 7).
        sure = {} if decision.confidence is None else {"confidence": decision.confidence}
        events = clients.records.events
        if decision.outcome != "respond":
            decision_event(events, msg, decision.outcome, decision.reason, mode=mode, **sure)
            return
        decision_event(events, msg, "respond", decision.reason, mode=mode, **sure)
        self._deferred = True  # final once the answer is posted (or fails)
        self._cont, new = cont.on_trigger(self._cont, msg, text=text)
        trigger_event(events, msg, tier, mode=mode, command=None)
        clients.records.triggers.add(entry_from_message(msg, trusted=True))
        self._start(new.request, msg, self._new_slot(), sink, nursery, typing=decision.show_typing)

    def _calls_bot(self, msg: Message) -> bool:
        bot_id = self._clients.chat.bot.user_id
        return bot_id is not None and (msg.mentions_user(bot_id) or self._replied_to_bot(msg))

    def _replied_to_bot(self, msg: Message) -> bool:
        ref = msg.message_reference
        bot_id = self._clients.chat.bot.user_id
        if ref is None or ref.message_id is None or bot_id is None:
            return False
        if msg.referenced_author is not None:
            return msg.referenced_author.id == bot_id
        for cached in self._clients.model.cache.recent(msg.channel_id, REPLY_SCAN):
            if cached.id == ref.message_id:
                return cached.author.id == bot_id
        return False

    # ----- continuation and generation ---------------------------------------------------------

    async def _follow_up(
        self,
        msg: Message,
        outcome: cont.FollowUp | cont.RestartAnswer,
        sink: AnswerSink,
        nursery: trio.Nursery,
    ) -> None:
        clients = self._clients
        restart = isinstance(outcome, cont.RestartAnswer)
        clients.records.events.emit(
            "continuation",
            message_id=msg.id,
            parent_id=outcome.parent_id,
            channel_id=msg.channel_id,
            author_id=msg.author.id,
            restart=restart,
        )
        clients.records.triggers.follow_up(outcome.parent_id, msg.text, msg.id)
        if not restart:
            # SPEC 5.4: the request was answered once; this line is context for the next one.
            decision_event(
                self._clients.records.events,
                msg,
                "context",
                "follow-up after the answer was posted: context for the next request",
            )
            return
        decision_event(
            self._clients.records.events,
            msg,
            "continuation",
            "follow-up inside the continuation window: restarting the answer with the merged"
            " request",
        )
        self._deferred = True  # joins the request: final with its answer
        gen = self._current.get(outcome.parent_id)
        if restart and gen is not None and not gen.replaced:
            # The answer in progress is replaced in its place in the reply order.
            gen.replaced = True
            gen.scope.cancel()
            after = (*gen.after, gen.ended)
            self._start(
                outcome.request,
                gen.trigger,
                gen.slot,
                gen.sink,
                nursery,
                typing=True,
                after=after,
                place=gen.place,
            )
        else:
            self._start(outcome.request, msg, self._new_slot(), sink, nursery, typing=True)

    def _start(
        self,
        request: cont.Request,
        trigger: Message,
        slot: ReplySlot,
        sink: AnswerSink,
        nursery: trio.Nursery,
        *,
        typing: bool,
        after: tuple[trio.Event, ...] = (),
        slash: bool = False,
        place: Place | None = None,
    ) -> None:
        if not slash and place is None:
            # Taken now, in the order answers are decided (`answer_gate`).
            place = self._clients.posting.replies.gate.place()
        if place is not None and place.admitted.is_set():
            self._expect(trigger, typing)
        gen = Generation(request, trigger, slot, sink, after, slash=slash, place=place)
        self._inflight.add(gen)
        self._current[request.parent_id] = gen
        self._spawn(nursery, lambda: self._generate(gen, typing))

    def _expect(self, trigger: Message, typing: bool) -> None:
        """The answer's requests are known now: their slots are asked for while its context
        is gathered (its history read first, when the cache has to read it)."""
        reads = 1 if self._clients.model.cache.will_fetch(trigger.channel_id) else 0
        self._clients.posting.replies.expect_requests(reads + (2 if typing else 1))

    async def _generate(self, gen: Generation, typing: bool) -> None:
        final = False
        shard = (
            nullcontext()
            if self._fence is None
            else self._fence.working(gen.trigger.guild_id, gen.scope)
        )
        try:
            with shard, gen.scope:
                for replaced in gen.after:
                    await replaced.wait()
                if gen.place is not None and not gen.place.admitted.is_set():
                    await gen.place.wait()
                    self._expect(gen.trigger, typing)
                try:
                    await self._answer(gen, typing)
                except Exception as exc:
                    message = error_line(exc)
                    self._clients.records.events.emit(
                        "error", scope="generate", message_id=gen.trigger.id, message=message
                    )
                    logger.error("answer to message %s failed: %s", gen.trigger.id, message)
                # Posted, skipped or failed (and logged): the decision is final. Not when a
                # follow-up replaced this answer, nor when a shutdown cancelled it.
                if not gen.replaced:
                    final = True
                    self._clients.records.handled.finish(
                        gen.request.message_ids, gen.trigger.channel_id, gen.trigger.guild_id
                    )
                # A skipped or failed answer still holds its place until the earlier ones post.
                await gen.slot.turn()
                await gen.sink.fail(gen.failure)
            if gen.scope.cancelled_caught and not (final or gen.replaced):
                # Stopped as its shard's lease ended (`ShardFence.end`): not final here.
                answer_post.left_to_next_holder(
                    self._clients.records, gen.trigger, gen.request.message_ids
                )
        finally:
            self._cont = cont.on_answered(self._cont, gen.request)
            self._inflight.discard(gen)
            if self._current.get(gen.request.parent_id) is gen:
                del self._current[gen.request.parent_id]
            if not gen.replaced:
                gen.slot.done.set()
                if gen.place is not None:
                    gen.place.leave()
            gen.ended.set()

    async def _answer(self, gen: Generation, typing: bool) -> None:
        clients = self._clients
        trigger = gen.trigger
        lines = await answer_prompt.context_lines(
            clients, trigger, gen.request, from_discord=not gen.slash
        )
        # Typing from here on, its first request right behind the model request (`sent`):
        # it costs an instant answer no time, and a slow answer shows it at once.
        sent = trio.Event()
        async with clients.posting.replies.typing(
            trigger.channel_id, enabled=typing, spawn=self._spawn_background, hold=sent
        ) as shown:
            asked = self._held(gen)
            matches = [] if gen.slash else self._persona_matches(asked)
            if matches:
                sent.set()  # a persona answer makes calls of its own
                # A persona answer posts itself: it is generated in its turn to keep the order.
                await gen.slot.turn()
                assert isinstance(gen.sink, ChannelReply), "a message's sink"
                handled = await persona_answer.maybe_answer(
                    clients.personas,
                    gen.sink,
                    asked,
                    trigger,
                    lines,
                    files=lambda: answer_prompt.request_files(clients, trigger, asked),
                    matches=matches,
                )
                if handled:
                    return
            files = await answer_prompt.request_files(clients, trigger, asked)
            request = await answer_prompt.answer_request(clients, trigger, asked, lines, files)
            if typing:
                # Asked for at the decision too; again in case those slots lapsed meanwhile.
                clients.posting.replies.expect_requests(2)
            if clients.chat.settings().replies.stream:
                await answer_post.stream_answer(
                    clients,
                    gen,
                    request,
                    claim=self._claim,
                    typing_shown=shown,
                    on_sent=sent.set,
                    post_notice=lambda text: self._post_answer(gen, text, persona=None),
                )
                return
            result = await clients.model.llm.complete(request, on_sent=sent.set)
            if result.ok and not shown.is_set():
                with trio.move_on_after(TYPING_FIRST_WAIT_SECONDS):
                    await shown.wait()
        if not result.ok:
            reason = answer_prompt.log_no_answer(clients.records, trigger, result)
            if reason is not None:
                gen.failure = f"Sorry, {reason.removeprefix('no answer: ')}."
            if result.notice:
                # A user over their own limit is told once per period, politely.
                await self._post_answer(gen, result.notice, persona=None)
            return
        await self._post_answer(gen, result.text, persona=None)

    def _held(self, gen: Generation) -> cont.Request:
        """The request as the model gets it: follow-ups held to `context_chars` (SPEC 9)."""
        return held_request(gen.request, self._clients.chat.settings().context_chars)

    def _persona_matches(self, request: cont.Request) -> list[pcore.PersonaMatch]:
        if self._clients.chat.personas is None:
            return []
        personas = persona_answer.current_personas(self._clients.personas)
        return pcore.match(personas, request.text) if personas is not None else []

    async def _claim(self, gen: Generation) -> bool:
        """Wait for the answer's turn; whether it is still to be posted (from then on it is,
        whatever comes: a follow-up is a new request)."""
        await gen.slot.turn()
        if cont.is_superseded(self._cont, gen.request):
            decision_event(
                self._clients.records.events,
                gen.trigger,
                "skip",
                "answer superseded by a follow-up: not posted",
            )
            return False
        self._cont = cont.on_answered(self._cont, gen.request)
        return True

    async def _post_answer(self, gen: Generation, text: str, *, persona: str | None) -> None:
        if not await self._claim(gen):
            return
        with trio.CancelScope(shield=True):
            try:
                await gen.sink.post(text)
            except Exception as exc:
                answer_post.post_failed(self._clients.records, gen.trigger, exc, persona)
