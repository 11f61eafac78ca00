"""The per-channel mailbox actor: SPEC section 5's pipeline for one channel, in arrival order.

Decisions happen one message at a time, in arrival order, and never wait for an answer: each
answer is generated in a child task (a follow-up from the same author cancels it and restarts
with the merged request), and replies keep the channel's order because each answer or command
reply waits for the previous one's post just before posting. A `trigger` event is written at
the decision; a `context` event (context_count) once the answer's context is built.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final, Protocol

import attrs
import trio

from picortex import config as config_mod
from picortex.actors import (
    agent_voice,
    attachment_parts,
    chats,
    composting,
    interactions,
    model_route,
    persona_answer,
)
from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import (
    ChannelRest,
    ChannelStore,
    ContextReader,
    FaultCheck,
    HandledMarks,
    ReplyPoster,
)
from picortex.actors.command_changes import Applied
from picortex.actors.failures import error_line, failure_text, skip_reason
from picortex.actors.interactions import InteractionClients
from picortex.actors.persona_answer import PersonaClients
from picortex.actors.pipeline import (
    TriggerBook,
)
from picortex.actors.polls import PollClients
from picortex.actors.replies import TYPING_FIRST_WAIT_SECONDS
from picortex.core import commands as cmds
from picortex.core import continuation as cont
from picortex.core import discriminate
from picortex.core import discriminator as disc
from picortex.core import personas as pcore
from picortex.core import slash as sl
from picortex.core.access import with_roles
from picortex.core.attention import AttentionDecision, decide_attention
from picortex.core.budget import workspace_id
from picortex.core.context import CONTEXT_FORMAT_NOTE
from picortex.core.llm import FAILED_OUTCOMES, ChatTurn, ContentPart, LLMRequest, TextPart
from picortex.core.merged import held_request
from picortex.core.triggerlog import entry_from_message
from picortex.core.trust import Tier, is_trusted, may_run, should_ignore, tier_of
from picortex.runtime.groups import lone_error
from picortex.store.chathome import ChatHome, default_prompt_template
from picortex.types import Interaction, InteractionType, Message, Snowflake

logger = logging.getLogger(__name__)

# A channel actor with nothing to do for this long exits; the next message restarts it.
IDLE_EXIT_SECONDS: Final = 300.0
# How far back in the channel's cache the request's follow-ups and recent images are sought.
ATTACHMENT_SCAN: Final = 200
# How far back in the channel's cache a replied-to message is sought when Discord did not
# include it (an older one is not taken for the bot's).
REPLY_SCAN: Final = 200
# An answer never waits longer than this for its context.
CONTEXT_TIMEOUT_SECONDS: Final = 30.0
# Messages handled per wake-up at most when the mailbox is deep: a backlog is drained
# without an idle timer and a scheduler round per message, yet other actors still get turns.
DRAIN_BATCH: Final = 32


class Inbox(Protocol):
    """The mailbox an actor reads: it belongs to the supervisor and outlives the actor."""

    async def receive(self) -> Message | Interaction: ...

    def receive_nowait(self) -> Message | Interaction: ...

    def done(self) -> None: ...

    @property
    def depth(self) -> int: ...


class ChannelClients(PersonaClients, InteractionClients, PollClients, Protocol):
    """What a channel actor uses (the app passes its `Pipeline`; a test, a fake)."""

    @property
    def store(self) -> ChannelStore:
        """Trust list, chat config and recall, read from memory; writes queued."""
        ...

    @property
    def replies(self) -> ReplyPoster:
        """Posting, typing and streaming answers."""
        ...

    @property
    def rest(self) -> ChannelRest:
        """Discord calls besides posting replies."""
        ...

    @property
    def cache(self) -> ContextReader:
        """The context cache."""
        ...

    @property
    def handled(self) -> HandledMarks:
        """Handled marks (SPEC 12)."""
        ...

    @property
    def triggers(self) -> TriggerBook:
        """The trigger log shown by `picortex status`."""
        ...

    @property
    def answers_seen(self) -> AnswersSeen:
        """The bot's replies seen on the gateway (noted by the router, asked here)."""
        ...

    @property
    def home(self) -> Path:
        """PICORTEX_HOME (chat homes live under it)."""
        ...

    @property
    def faults(self) -> FaultCheck | None:
        """Fault points (tests only)."""
        ...

    @property
    def answer_timeout(self) -> float:
        """The deadline of one answer's model call."""
        ...

    @property
    def crash_drain_seconds(self) -> float:
        """How long answers in flight may finish after a crash."""
        ...

    def finish(self, message: Message | Interaction) -> None:
        """The decision on `message` is final."""
        ...

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: Snowflake | None, now: float
    ) -> Applied:
        """Store what a command changed: the poll it starts, what it forgot."""
        ...


def _label(tier: Tier | None) -> str:
    """A requester's tier as the log names it (`untrusted` for someone not on the list)."""
    return tier.label if tier is not None else "untrusted"


@attrs.define(eq=False)
class _ReplySlot:
    """A place in the channel's reply order; `done` once its reply is posted (or given up)."""

    previous: trio.Event | None
    done: trio.Event = attrs.field(factory=trio.Event)

    async def turn(self) -> None:
        """Wait until every earlier reply of the channel is done.

        No scheduler round when nothing is pending: a ready reply goes out before other
        tasks' work is interleaved in front of it.
        """
        if self.previous is not None and not self.previous.is_set():
            await self.previous.wait()


@attrs.define(eq=False)
class _Ask:
    """A slash `ask` being answered: the deferral goes first, the answer edits it."""

    interaction: Interaction
    deferred: trio.Event = attrs.field(factory=trio.Event)
    answered: bool = False
    # Why there is no answer, for the user, when generation skipped or failed.
    failure: str = "Sorry, I could not answer that this time."


@attrs.define(eq=False)
class _Generation:
    """One answer being generated for a request; a restart replaces it in the same slot.

    `after` are the `ended` events of the answers it replaced: it makes its model call only
    once they have ended, so their calls are settled and logged, and their reservations
    released, before it reserves its own (SPEC 9).
    """

    request: cont.Request
    trigger: Message
    slot: _ReplySlot
    after: tuple[trio.Event, ...] = ()
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    replaced: bool = False
    ended: trio.Event = attrs.field(factory=trio.Event)


class ChannelActor:
    """One channel's pipeline. State is in memory only and rebuilt from the store."""

    def __init__(self, channel_id: Snowflake, inbox: Inbox, clients: ChannelClients) -> None:
        self.channel_id = channel_id
        self._inbox = inbox
        self._clients = clients
        self._cont = cont.ContinuationState(clients.settings().continuation_seconds)
        self._inflight: set[_Generation] = set()
        self._current: dict[Snowflake, _Generation] = {}  # the live answer, by request id
        self._last: trio.Event | None = None  # the latest slot's `done`
        self._tasks = 0
        self._nursery: trio.Nursery | None = None
        self._idle = trio.Event()  # set while no child task runs
        self._idle.set()
        # Set while handling a message whose decision becomes final later (an answer or a
        # command reply to post): it is marked handled then, not when the mailbox moves on.
        self._deferred = False
        self._asks: dict[Snowflake, _Ask] = {}  # slash `ask`s in progress, by interaction id

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Handle messages until idle for IDLE_EXIT_SECONDS with nothing queued."""
        # A restart begins a new reply order: the tasks of a crashed run are all gone.
        self._last = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    message: Message | Interaction | None = None
                    with trio.move_on_after(IDLE_EXIT_SECONDS):
                        message = await self._inbox.receive()
                    if message is None:
                        if self._tasks == 0 and self._inbox.depth == 0:
                            break
                        continue
                    for _ in range(DRAIN_BATCH):
                        self._deferred = False
                        try:
                            await self._handle(message, nursery)
                        except Exception:
                            # Only the message in hand is lost (SPEC 12): it is not retried,
                            # even after a restart; answers to earlier messages finish first,
                            # or are logged as abandoned.
                            self._clients.finish(message)
                            await self._drain()
                            raise
                        if not self._deferred:
                            # Decided here and now (skipped, refused, context): final.
                            self._clients.finish(message)
                        self._inbox.done()
                        if not self._inbox.depth:
                            break
                        message = self._inbox.receive_nowait()
        except BaseExceptionGroup as group:
            # Surface a lone crash as itself, so the supervisor logs what actually failed.
            lone = lone_error(group)
            if lone is None:
                raise
            raise lone from None

    def may_continue(self, author_id: Snowflake, sent_at: float) -> bool:
        """Whether a message from `author_id` sent at `sent_at` (Discord's clock) could join
        an open request."""
        return cont.window_for(self._cont, self.channel_id, author_id, sent_at) is not None

    async def _drain(self) -> None:
        with trio.move_on_after(self._clients.crash_drain_seconds):
            await self._idle.wait()
        for gen in self._inflight:
            self._clients.events.emit(
                "error",
                scope="generate",
                message_id=gen.trigger.id,
                channel_id=gen.trigger.channel_id,
                message="abandoned: channel actor crashed",
            )
            # Logged as failed, so final: a crash is never retried (SPEC 12).
            self._clients.handled.finish(
                gen.request.message_ids, gen.trigger.channel_id, gen.trigger.guild_id
            )

    def _spawn(self, nursery: trio.Nursery, fn: Callable[[], Awaitable[None]]) -> None:
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

    def _spawn_background(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run `fn` in the actor's nursery (it may outlive the answer that started it)."""
        assert self._nursery is not None, "only called while the actor runs"
        self._spawn(self._nursery, fn)

    def _new_slot(self) -> _ReplySlot:
        slot = _ReplySlot(self._last)
        self._last = slot.done
        return slot

    # ----- one message ---------------------------------------------------------------------

    async def _handle(self, msg: Message | Interaction, nursery: trio.Nursery) -> None:
        if isinstance(msg, Interaction):
            await self._interaction(msg, nursery)
            return
        clients = self._clients
        settings = clients.settings.refresh()
        bot_id = clients.bot.user_id
        ignored = should_ignore(msg, bot_id)
        if ignored is not None:
            if ignored != "own message":
                self._decision(msg, "ignore", ignored)
            return
        if clients.faults is not None:
            clients.faults.check("mailbox", msg.content)
        author = msg.author.id
        tier = self._tier(author, settings.owner_id, msg.member_roles)
        command_text = cmds.detect_command(
            msg,
            wakeword=settings.wakeword,
            bot_user_id=bot_id,
            group_dm=clients.registry.is_group_dm(msg.channel_id),
        )
        self._cont = attrs.evolve(self._cont, seconds=settings.continuation_seconds)
        text = cmds.strip_mention(msg.text, bot_id)

        if tier is None:
            # `forget me` is open to anyone whose words may be stored (someone taken off
            # the trust list, say): it costs no model call and deletes only their own.
            command = cmds.parse_command(command_text) if command_text is not None else None
            if command is not None and cmds.forgets_only_requester(command, author):
                await self._command(msg, command_text or "", tier, nursery, command=command)
                return
            what = "command from an untrusted author" if command_text is not None else None
            self._decision(msg, "ignore", what or "untrusted author: never answered")
            return
        # Only trusted authors' words are kept for recall (SPEC 8): strangers cost no write.
        chats.remember(clients.store, msg, msg.text)

        if command_text is None:
            window = cont.window_for(self._cont, msg.channel_id, msg.author.id, msg.sent_at)
            answers = clients.answers_seen
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
                    persona_answer.observe(self._clients, msg, text)
                    await self._follow_up(msg, outcome, nursery)
                    return

        if command_text is not None:
            await self._command(msg, command_text, tier, nursery)
            return
        await self._attend(msg, text, tier, nursery)

    def _tier(
        self, author: Snowflake, owner_id: Snowflake | None, roles: tuple[Snowflake, ...] = ()
    ) -> Tier | None:
        """The author's trust tier (SPEC 3); an allowed role counts as `user` (SPEC 18); None
        when not trusted."""
        stored = None if author == owner_id else self._clients.store.get_tier(author)
        listed = tier_of(author, owner_id, {author: stored} if stored else {})
        return with_roles(listed, roles, self._clients.settings().access.allow_roles)

    def _decision(self, msg: Message, outcome: str, reason: str, **extra: object) -> None:
        self._clients.events.emit(
            "decision",
            message_id=msg.id,
            channel_id=msg.channel_id,
            guild_id=msg.guild_id,
            author_id=msg.author.id,
            outcome=outcome,
            reason=reason,
            **extra,
        )

    def _trigger(self, msg: Message, tier: Tier | None, **extra: object) -> None:
        self._clients.events.emit(
            "trigger",
            message_id=msg.id,
            channel_id=msg.channel_id,
            guild_id=msg.guild_id,
            author_id=msg.author.id,
            author=msg.author.username,
            tier=_label(tier),
            **extra,
        )

    # ----- commands (SPEC 6) -----------------------------------------------------------------

    async def _command(
        self,
        msg: Message,
        command_text: str,
        tier: Tier | None,
        nursery: trio.Nursery,
        *,
        command: cmds.Command | None = None,
    ) -> None:
        clients = self._clients
        if command is None:
            command = cmds.parse_command(command_text)
        name, reply, poll_to_start, _ = await self._execute(msg, command, command_text, tier)
        if poll_to_start is not None and clients.spawn is not None:
            from picortex.actors.polls import run_poll

            clients.spawn(run_poll, clients, msg, poll_to_start)
            return
        plan = clients.replies.reply_plan(msg, name)
        slot = self._new_slot()

        async def post_reply() -> None:
            try:
                await slot.turn()
                await clients.replies.post(plan, reply, command=name, trigger_id=msg.id)
            except Exception as exc:
                logger.warning("reply to %s command failed: %s", name, error_line(exc))
            finally:
                slot.done.set()
            # Posted or failed (and logged): final. Cancelled by a shutdown: handled again.
            clients.finish(msg)

        self._deferred = True
        self._spawn(nursery, post_reply)

    async def _execute(
        self,
        msg: Message,
        command: cmds.Command,
        command_text: str,
        tier: Tier | None,
        *,
        source: str | None = None,
    ) -> tuple[str, str, cmds.StartPoll | None, cmds.CommandResult]:
        """Run a command (typed or slash) through the executor, apply and log its changes.

        Returns its name, the reply text, the poll to start (if any) and the result.
        """
        clients = self._clients
        settings = clients.settings()
        name = cmds.command_name(command)
        chat_id = msg.channel_id
        mode = self._mode(msg)
        # Relative to the home: the machine's own paths are nobody's business in a chat.
        prompt_path = ChatHome(clients.home, str(chat_id)).prompt_path.relative_to(clients.home)
        state = cmds.CommandState(
            owner_id=settings.owner_id,
            trust=dict(clients.store.trust_list()),
            wakeword=settings.wakeword,
            attention_mode=mode,
            prompt_path=f"PICORTEX_HOME/{prompt_path.as_posix()}",
            poll_enabled=settings.poll_enabled,
            poll_seconds=settings.poll_seconds,
            config_values=config_mod.runtime_values(settings),
            parse_config_value=config_mod.parse_runtime_value,
            format_config_value=config_mod.format_value,
            requester_id=msg.author.id,
            user_modes=chats.user_modes(clients.store, chat_id),
            access_note=chats.mode_choice(
                clients.store, clients.registry, msg, settings.attention, settings.access
            ).blocked,
            chat=await agent_voice.chat_settings(
                clients.home, clients.store, chat_id, settings.discriminator.model
            ),
        )
        result = cmds.execute(command, tier, state)
        applied = await clients.apply_command_changes(
            result.changes, chat_id=chat_id, now=time.time()
        )
        reply = applied.reply(result, msg.author.id)
        label = _label(tier)
        self._trigger(msg, tier, mode=mode, command=name)
        forgot = {
            "forgotten": [
                {"user_id": f.user_id, "messages": f.messages, "observations": f.observations}
                for f in applied.forgotten
            ]
        }
        clients.events.emit(
            "command",
            message_id=msg.id,
            channel_id=msg.channel_id,
            requester=msg.author.id,
            tier=label,
            command=name,
            text=command_text[:200],
            result=result.outcome,
            **({"source": source} if source else {}),
            **(forgot if applied.forgotten else {}),
        )
        for f in applied.forgotten:
            clients.triggers.forget_author(f.user_id)
        clients.triggers.add(
            entry_from_message(msg, trusted=tier is not None, command=command_text)
        )
        article = "an" if label[0] in "aeiou" else "a"
        self._decision(msg, "command", f"{name} command from {article} {label}")
        return name, reply, applied.poll, result

    # ----- slash commands (SPEC 15) ---------------------------------------------------------

    async def _interaction(self, inter: Interaction, nursery: trio.Nursery) -> None:
        """A slash command or autocomplete: same trust tiers and executor as typed commands.

        Every command gets an answer whatever the chat's attention mode: a message, or for
        `ask` a deferral at once and the model's answer as its edit.
        """
        clients = self._clients
        settings = clients.settings.refresh()
        if inter.user.bot or inter.user.id == clients.bot.user_id:
            return
        author = inter.user.id
        tier = self._tier(author, settings.owner_id, inter.member_roles)
        if inter.type == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
            # Config keys are for those who may change config; others see no suggestions.
            allowed = tier is not None and may_run("config", tier)
            choices = sl.autocomplete_choices(inter, config_mod.RUNTIME_KEYS) if allowed else []
            self._spawn(nursery, lambda: interactions.autocomplete(clients, inter, choices))
            return
        if inter.type != InteractionType.APPLICATION_COMMAND:
            return
        action = sl.action_for(inter)
        text = sl.render_action(action)
        msg = interactions.as_message(inter, f"{cmds.SLASH_PREFIX} {text}")

        def reply(
            answer: str, *, ephemeral: bool, command: str | None, refused: bool = False
        ) -> None:
            self._spawn(
                nursery,
                lambda: _ignore(
                    interactions.respond(
                        clients,
                        inter,
                        answer,
                        ephemeral=ephemeral,
                        command=command,
                        refused=refused,
                    )
                ),
            )

        if tier is None and not cmds.forgets_only_requester(action, author):
            self._decision(msg, "ignore", "slash command from an untrusted user: refused privately")
            reply(interactions.REFUSAL, ephemeral=True, command=sl.name_of(action), refused=True)
            return
        if isinstance(action, sl.NotOurs):
            self._decision(msg, "ignore", f"unknown application command /{action.name}")
            reply(f"This bot answers `/{sl.COMMAND_NAME}` only.", ephemeral=True, command=None)
            return
        if isinstance(action, sl.Ask):
            if tier is not None:
                self._ask(msg, inter, action, tier, nursery)
            return
        name, answer, poll, result = await self._execute(msg, action, text, tier, source="slash")
        # Refusals, mistakes, sensitive commands and what someone had forgotten are for the
        # requester's eyes only.
        ephemeral = (
            not result.ok
            or name in sl.PRIVATE_SUBCOMMANDS
            or clients.replies.reply_target(name) == "dm"
        )
        if poll is None:
            reply(answer, ephemeral=ephemeral, command=name)
            return

        async def start_poll() -> None:
            if not await interactions.respond(
                clients, inter, answer, ephemeral=False, command=name
            ):
                return
            poll_id = await interactions.original_message_id(clients, inter)
            if poll_id is not None and clients.spawn is not None:
                from picortex.actors.polls import run_poll

                clients.spawn(
                    functools.partial(run_poll, poll_message_id=poll_id), clients, msg, poll
                )

        self._spawn(nursery, start_poll)

    def _ask(
        self, msg: Message, inter: Interaction, action: sl.Ask, tier: Tier, nursery: trio.Nursery
    ) -> None:
        """`/picortex ask`: defer now, answer by editing the deferred response."""
        clients = self._clients
        mode = self._mode(msg)
        self._decision(msg, "respond", "slash command: always answered", mode=mode)
        self._trigger(msg, tier, mode=mode, command=sl.Ask.NAME)
        clients.triggers.add(entry_from_message(msg, trusted=True, command=msg.content))
        ask = _Ask(inter)
        self._asks[inter.id] = ask

        async def acknowledge() -> None:
            try:
                await interactions.defer(clients, inter)
            finally:
                ask.deferred.set()

        self._spawn(nursery, acknowledge)
        request = cont.Request(
            parent_id=inter.id,
            channel_id=inter.channel_id,
            author_id=inter.user.id,
            message_ids=(inter.id,),
            texts=(action.text,),
        )
        trigger = attrs.evolve(msg, content=action.text)
        self._start(request, trigger, self._new_slot(), nursery, typing=False)

    async def _settle_ask(self, gen: _Generation) -> None:
        """A slash `ask` that got no answer still gets one sentence saying why."""
        ask = self._asks.get(gen.trigger.id)
        if ask is None or ask.answered:
            return
        ask.answered = True
        await ask.deferred.wait()
        with contextlib.suppress(Exception):  # finish_deferred logs its failures
            await interactions.finish_deferred(
                self._clients, ask.interaction, ask.failure, command=sl.Ask.NAME
            )

    # ----- attention (SPEC 5 step 5) ----------------------------------------------------------

    def _mode(self, msg: Message) -> str:
        clients = self._clients
        return chats.attention_mode(
            clients.store, clients.registry, msg, clients.settings().attention
        )

    async def _attend(self, msg: Message, text: str, tier: Tier, nursery: trio.Nursery) -> None:
        clients = self._clients
        bot_id = clients.bot.user_id or 0
        settings = clients.settings()
        choice = chats.mode_choice(
            clients.store, clients.registry, msg, settings.attention, settings.access
        )
        mode = choice.mode
        persona_answer.observe(clients, msg, text)
        decision = decide_attention(
            msg,
            bot_user_id=bot_id,
            owner_id=clients.settings().owner_id,
            mode=mode,
            is_dm=msg.is_dm,
            replied_to_bot=self._replied_to_bot(msg),
        )
        if choice.why:
            decision = attrs.evolve(decision, reason=f"{decision.reason} ({choice.why})")
        if decision.outcome == "discriminate":
            decision = await self._discriminate(msg, mode, decision)
        # The discriminator's confidence, when it gave one, goes into the event (SPEC 7).
        sure = {} if decision.confidence is None else {"confidence": decision.confidence}
        if decision.outcome != "respond":
            self._decision(msg, decision.outcome, decision.reason, mode=mode, **sure)
            return
        self._decision(msg, "respond", decision.reason, mode=mode, **sure)
        self._deferred = True  # final once the answer is posted (or fails)
        self._cont, new = cont.on_trigger(self._cont, msg, text=text)
        self._trigger(msg, tier, mode=mode, command=None)
        clients.triggers.add(entry_from_message(msg, trusted=True))
        self._start(new.request, msg, self._new_slot(), nursery, typing=decision.show_typing)

    def _calls_bot(self, msg: Message) -> bool:
        bot_id = self._clients.bot.user_id
        return bot_id is not None and (msg.mentions_user(bot_id) or self._replied_to_bot(msg))

    def _replied_to_bot(self, msg: Message) -> bool:
        ref = msg.message_reference
        bot_id = self._clients.bot.user_id
        if ref is None or ref.message_id is None or bot_id is None:
            return False
        if msg.referenced_author is not None:
            return msg.referenced_author.id == bot_id
        for cached in self._clients.cache.recent(msg.channel_id, REPLY_SCAN):
            if cached.id == ref.message_id:
                return cached.author.id == bot_id
        return False

    async def _discriminate(
        self, msg: Message, mode: str, rule: AttentionDecision
    ) -> AttentionDecision:
        """Ask the chat's discriminator; failures fail open in a DM and closed in a group."""
        clients = self._clients
        settings = clients.settings()
        home = ChatHome(clients.home, str(msg.channel_id))
        try:
            template = await trio.to_thread.run_sync(home.read_prompt)
        except Exception as exc:
            logger.warning("discriminator prompt unavailable, using the default: %s", exc)
            template = default_prompt_template()
        history = discriminate.history_before(
            clients.cache.recent(msg.channel_id, discriminate.HISTORY_SCAN),
            msg,
            settings.discriminator.history,
            clients.is_trusted,
        )
        own = clients.store.get_chat_config(msg.channel_id)
        chat = disc.ChatMeta(
            chat_id=str(msg.channel_id),
            kind="dm"
            if msg.is_dm
            else ("thread" if clients.registry.is_thread(msg.channel_id) else "group"),
            name=_channel_name(clients, msg.channel_id),
            bot_name=clients.bot.username,
        )
        try:
            request = discriminate.build_request(
                settings.classifier(own.discriminator_model if own is not None else None),
                template,
                msg,
                history,
                chat,
                workspace_id(msg.guild_id),
            )
        except disc.PromptTooLarge as exc:
            return disc.fail_decision(msg.is_dm, f"discriminator prompt too large: {exc}")
        paused = await composting.stage_pause(clients, "discriminate")
        if paused is not None:
            return disc.fail_decision(msg.is_dm, f"discriminator {composting.until_text(paused)}")
        async with clients.replies.typing(
            msg.channel_id, enabled=rule.show_typing, spawn=self._spawn_background
        ):
            result = await clients.llm.complete(request)
        if result.failed:
            clients.failures.record(
                stage="discriminate",
                workspace=workspace_id(msg.guild_id),
                persona=None,
                signal_id=msg.id,
                error=result.error or result.outcome,
                stack_trace=result.stack_trace,
            )
        return discriminate.interpret(
            result,
            is_dm=msg.is_dm,
            timeout_seconds=settings.discriminator.timeout_seconds,
            threshold=own.discriminator_threshold if own is not None else None,
        )

    # ----- continuation and generation ---------------------------------------------------------

    async def _follow_up(
        self, msg: Message, outcome: cont.FollowUp | cont.RestartAnswer, nursery: trio.Nursery
    ) -> None:
        clients = self._clients
        restart = isinstance(outcome, cont.RestartAnswer)
        clients.events.emit(
            "continuation",
            message_id=msg.id,
            parent_id=outcome.parent_id,
            channel_id=msg.channel_id,
            author_id=msg.author.id,
            restart=restart,
        )
        clients.triggers.follow_up(outcome.parent_id, msg.text, msg.id)
        if not restart:
            # SPEC 5.4: the request was answered once; this line is context for the next one.
            self._decision(
                msg,
                "context",
                "follow-up after the answer was posted: context for the next request",
            )
            return
        self._decision(
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
            self._start(outcome.request, gen.trigger, gen.slot, nursery, typing=True, after=after)
        else:
            self._start(outcome.request, msg, self._new_slot(), nursery, typing=True)

    def _start(
        self,
        request: cont.Request,
        trigger: Message,
        slot: _ReplySlot,
        nursery: trio.Nursery,
        *,
        typing: bool,
        after: tuple[trio.Event, ...] = (),
    ) -> None:
        gen = _Generation(request, trigger, slot, after)
        self._inflight.add(gen)
        self._current[request.parent_id] = gen
        self._spawn(nursery, lambda: self._generate(gen, typing))

    async def _generate(self, gen: _Generation, typing: bool) -> None:
        try:
            with gen.scope:
                for replaced in gen.after:
                    await replaced.wait()
                try:
                    await self._answer(gen, typing)
                except Exception as exc:
                    message = error_line(exc)
                    self._clients.events.emit(
                        "error", scope="generate", message_id=gen.trigger.id, message=message
                    )
                    logger.error("answer to message %s failed: %s", gen.trigger.id, message)
                # Posted, skipped or failed (and logged): the decision is final. Not when a
                # follow-up replaced this answer, nor when a shutdown cancelled it.
                if not gen.replaced:
                    self._clients.handled.finish(
                        gen.request.message_ids, gen.trigger.channel_id, gen.trigger.guild_id
                    )
                # A skipped or failed answer still holds its place until the earlier ones post.
                await gen.slot.turn()
                await self._settle_ask(gen)
        finally:
            if not gen.replaced:
                self._asks.pop(gen.trigger.id, None)
            self._cont = cont.on_answered(self._cont, gen.request)
            self._inflight.discard(gen)
            if self._current.get(gen.request.parent_id) is gen:
                del self._current[gen.request.parent_id]
            if not gen.replaced:
                gen.slot.done.set()
            gen.ended.set()

    async def _answer(self, gen: _Generation, typing: bool) -> None:
        clients = self._clients
        trigger = gen.trigger
        lines = await self._context(gen)
        # Typing from here on, its first request right behind the model request (`sent`):
        # it costs an instant answer no time, and a slow answer shows it at once.
        sent = trio.Event()
        async with clients.replies.typing(
            trigger.channel_id, enabled=typing, spawn=self._spawn_background, hold=sent
        ) as shown:
            asked = self._held(gen)
            matches = [] if gen.trigger.id in self._asks else self._persona_matches(asked)
            if matches:
                sent.set()  # a persona answer makes calls of its own
                # A persona answer posts itself: it is generated in its turn to keep the order.
                await gen.slot.turn()
                handled = await persona_answer.maybe_answer(
                    clients,
                    asked,
                    trigger,
                    lines,
                    files=lambda: self._files(gen),
                    matches=matches,
                )
                if handled:
                    return
            prompt = asked.text
            if lines:
                conversation = "\n".join(lines)
                prompt = (
                    f"Recent conversation, oldest first. {CONTEXT_FORMAT_NOTE}\n"
                    f"{conversation}\n\nThe request from {trigger.author.display_name}:\n"
                    f"{asked.text}"
                )
            prompt = prompt or "(no text)"
            content: str | tuple[ContentPart, ...] = prompt
            files = await self._files(gen)
            if not files.empty:
                text = f"{prompt}\n\n{files.text}" if files.text else prompt
                content = (*files.images, TextPart(text)) if files.images else text
            request = LLMRequest(
                stage="generate",
                system=await agent_voice.answer_system_prompt(
                    home=clients.home,
                    owner_prompt=clients.settings().agent.system_prompt,
                    registry=clients.registry,
                    bot=clients.bot,
                    trigger=trigger,
                ),
                max_tokens=clients.settings().agent.max_tokens,
                messages=(ChatTurn("user", content),),
                workspace=workspace_id(trigger.guild_id),
                tier=await model_route.answer_tier(clients, trigger, asked.text),
                signal_id=str(trigger.id),
                timeout=clients.answer_timeout,
                user_id=trigger.author.id,
            )
            if clients.settings().replies.stream:
                await self._stream_answer(gen, request, shown, sent.set)
                return
            result = await clients.llm.complete(request, on_sent=sent.set)
            if result.ok and not shown.is_set():
                with trio.move_on_after(TYPING_FIRST_WAIT_SECONDS):
                    await shown.wait()
        if not result.ok:
            reason = self._skip_or_fail(
                trigger, result.outcome, result.error, result.stack_trace, None, result.limit
            )
            ask = self._asks.get(trigger.id)
            if ask is not None and reason is not None:
                ask.failure = f"Sorry, {reason.removeprefix('no answer: ')}."
            if result.notice:
                # A user over their own limit is told once per period, politely.
                await self._post_answer(gen, result.notice, persona=None)
            return
        await self._post_answer(gen, result.text, persona=None)

    async def _stream_answer(
        self,
        gen: _Generation,
        request: LLMRequest,
        typing_shown: trio.Event,
        on_sent: Callable[[], None],
    ) -> None:
        """The answer streamed into its reply (SPEC 16), in the reply's turn."""
        clients = self._clients
        trigger = gen.trigger
        plan = clients.replies.reply_plan(trigger, None)

        async def before_first_post() -> bool:
            await gen.slot.turn()
            if cont.is_superseded(self._cont, gen.request):
                self._decision(trigger, "skip", "answer superseded by a follow-up: not posted")
                return False
            # From here on the answer is posted whatever comes: a follow-up is a new request.
            self._cont = cont.on_answered(self._cont, gen.request)
            if not typing_shown.is_set():
                with trio.move_on_after(TYPING_FIRST_WAIT_SECONDS):
                    await typing_shown.wait()
            return True

        ask = self._asks.get(trigger.id)
        surface = None
        if ask is not None:
            # A slash `ask`: the answer grows in the deferred response (SPEC 15).
            surface = interactions.AnswerSurface(clients, ask.interaction, ask.deferred.wait)
        streamed = await clients.replies.stream_answer(
            request,
            lambda: clients.replies.resolve_plan(plan),
            trigger_id=trigger.id,
            before_first_post=before_first_post,
            surface=surface,
            on_sent=on_sent,
            command=None if ask is None else sl.Ask.NAME,
        )
        if ask is not None and streamed.reply.started:
            ask.answered = True
        result = streamed.result
        if streamed.reply.failure is not None:
            message, trace = failure_text(streamed.reply.failure)
            clients.failures.record(
                stage="post",
                workspace=workspace_id(trigger.guild_id),
                persona=None,
                signal_id=trigger.id,
                error=message,
                stack_trace=trace,
            )
        elif result is not None and not result.ok:
            self._skip_or_fail(
                trigger, result.outcome, result.error, result.stack_trace, None, result.limit
            )
            if result.notice and not streamed.reply.started:
                # A user over their own limit is told once per period, politely.
                await self._post_answer(gen, result.notice, persona=None)

    def _held(self, gen: _Generation) -> cont.Request:
        """The request as the model gets it: follow-ups held to `context_chars` (SPEC 9)."""
        return held_request(gen.request, self._clients.settings().context_chars)

    async def _files(self, gen: _Generation) -> attachment_parts.RequestFiles:
        """The request's attachments and recent images, as model content (SPEC 16)."""
        clients = self._clients
        trigger = gen.trigger
        settings = clients.settings()
        recent = clients.cache.recent(trigger.channel_id, ATTACHMENT_SCAN)
        own_ids = set(self._held(gen).message_ids) - {trigger.id}
        own = [trigger, *(m for m in recent if m.id in own_ids)]
        context = [m for m in recent if m.id < trigger.id][-settings.context_messages :]
        if not any(m.attachments for m in (*own, *context)):
            return attachment_parts.RequestFiles()
        owner = settings.owner_id
        # Files of the owner and the trust list only: not the bot's own (`is_trusted` without
        # the bot's id), it posts none worth fetching back.
        trusted = [
            author
            for author in {m.author.id for m in context if m.attachments}
            if is_trusted(author, owner, clients.store.get_tier)
        ]
        try:
            return await attachment_parts.gather(
                clients.rest.download_attachment, own, context, trusted
            )
        except Exception as exc:  # the answer goes on without its files
            logger.warning("attachments of %s unavailable: %s", trigger.id, exc)
            return attachment_parts.RequestFiles()

    async def _context(self, gen: _Generation) -> tuple[str, ...]:
        """The trigger's context lines from the cache (none when it cannot give them)."""
        clients = self._clients
        settings = clients.settings()
        trigger = gen.trigger
        try:
            with trio.fail_after(CONTEXT_TIMEOUT_SECONDS):
                lines = await clients.cache.context_for(
                    trigger,
                    max_messages=settings.context_messages,
                    max_chars=settings.context_chars,
                    trusted=clients.is_trusted,
                    # A slash `ask` is an interaction, not a message Discord sent.
                    from_discord=trigger.id not in self._asks,
                )
        except Exception as exc:
            logger.warning("context for %s unavailable: %s", trigger.id, exc)
            clients.events.emit(
                "error", scope="context", message_id=trigger.id, message=error_line(exc)
            )
            lines = ()
        clients.events.emit(
            "context",
            message_id=gen.request.parent_id,
            channel_id=trigger.channel_id,
            context_count=len(lines),
        )
        clients.triggers.set_context(gen.request.parent_id, lines)
        return lines

    def _persona_matches(self, request: cont.Request) -> list[pcore.PersonaMatch]:
        if self._clients.personas is None:
            return []
        personas = persona_answer.current_personas(self._clients)
        return pcore.match(personas, request.text) if personas is not None else []

    def _skip_or_fail(
        self,
        trigger: Message,
        outcome: str,
        error: str | None,
        trace: str | None,
        persona: str | None,
        limit: str | None = None,
    ) -> str | None:
        """Log why there is no answer; returns the reason when it was a skip, not a failure."""
        clients = self._clients
        if outcome in FAILED_OUTCOMES:
            clients.failures.record(
                stage="generate",
                workspace=workspace_id(trigger.guild_id),
                persona=persona,
                signal_id=trigger.id,
                error=error or outcome,
                stack_trace=trace,
            )
            return None
        reason = f"no answer: {skip_reason(outcome, limit)}"
        self._decision(trigger, "skip", reason)
        return reason

    async def _post_answer(self, gen: _Generation, text: str, *, persona: str | None) -> None:
        clients = self._clients
        trigger = gen.trigger
        plan = clients.replies.reply_plan(trigger, None)
        await gen.slot.turn()
        if cont.is_superseded(self._cont, gen.request):
            self._decision(trigger, "skip", "answer superseded by a follow-up: not posted")
            return
        # From here on the answer is posted whatever comes: a follow-up now is a new request.
        self._cont = cont.on_answered(self._cont, gen.request)
        ask = self._asks.get(trigger.id)
        with trio.CancelScope(shield=True):
            try:
                if ask is not None:
                    ask.answered = True
                    await ask.deferred.wait()
                    await interactions.finish_deferred(
                        clients, ask.interaction, text, command=sl.Ask.NAME
                    )
                    return
                await clients.replies.post(plan, text, command=None, trigger_id=trigger.id)
            except Exception as exc:
                message, trace = failure_text(exc)
                clients.failures.record(
                    stage="post",
                    workspace=workspace_id(trigger.guild_id),
                    persona=persona,
                    signal_id=trigger.id,
                    error=message,
                    stack_trace=trace,
                )


async def _ignore(result: Awaitable[object]) -> None:
    """Await a helper that logs its own failures; its return value is not needed."""
    await result


def _channel_name(clients: ChannelClients, channel_id: Snowflake) -> str:
    ch = clients.registry.get(channel_id)
    return ch.name if ch is not None and ch.name else str(channel_id)
