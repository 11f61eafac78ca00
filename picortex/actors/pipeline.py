"""What channel actors share: settings, identity, registry, and the I/O helpers they use.

The channel actor decides; these helpers post replies through the response policy, record
failed invocations (SPEC 9) and keep the bot's view of its identity and channels. The app
builds one `Pipeline`; each user is typed by the narrow protocol of what it calls
(`picortex.actors.clients`), so none depends on this whole object.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio

from picortex.actors.clients import ChannelRest
from picortex.actors.command_changes import apply_changes
from picortex.actors.context_cache import ContextCache
from picortex.actors.handled import HandledLedger
from picortex.actors.llm import LLMActor, LLMRequest, LLMResult
from picortex.actors.stream_reply import ChannelSurface, ReplySurface, StreamedReply
from picortex.config import Settings
from picortex.core import commands as cmds
from picortex.core import policy
from picortex.core.redact import redact
from picortex.core.split import split_reply
from picortex.core.stream import with_cut_notice
from picortex.core.triggerlog import TriggerEntry, TriggerLog
from picortex.errors import FatalDiscordError
from picortex.store import Store, StoreActor
from picortex.store.personas import PersonaLoader
from picortex.types import Channel, ChannelType, EventSink, Interaction, Message, Snowflake

logger = logging.getLogger(__name__)

# Discord shows a typing indicator for 10 s; renew it a little sooner.
TYPING_RENEW_SECONDS: Final = 8.0
# A ready answer waits at most this long for its first typing request (sent when generation
# started, so normally long done): the indicator comes before the reply, never much later.
TYPING_FIRST_WAIT_SECONDS: Final = 0.5
ERROR_MESSAGE_MAX_CHARS: Final = 500
# The deadline of one answer's model call: long answers take a while, a hung call must not.
ANSWER_TIMEOUT_SECONDS: Final = 60.0
# The persona column of an error row when the default agent (no persona) failed.
DEFAULT_PERSONA: Final = "default"
# A crashing channel actor lets answers already in flight finish for up to this long (one
# model call's deadline plus a post) before it restarts; what is left is logged as abandoned.
CRASH_DRAIN_SECONDS: Final = ANSWER_TIMEOUT_SECONDS + 10.0


class Rest(ChannelRest, Protocol):
    """The REST calls channel-side code makes (picortex.discord.rest.RestClient)."""

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

    async def get_current_user(self) -> dict[str, Any]: ...

    async def trigger_typing(
        self, channel_id: int, *, on_sent: Callable[[], None] | None = None
    ) -> None: ...

    async def get_channel_messages(
        self,
        channel_id: int,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]: ...


class Faults(Protocol):
    """PICORTEX_FAULT_INJECT's check."""

    def check(self, actor: str, content: str) -> None: ...


@attrs.define
class BotIdentity:
    """Who the bot is; known after READY."""

    user_id: Snowflake | None = None
    username: str = "picortex"


@attrs.define
class ChannelRegistry:
    """Channels and threads seen in GUILD_CREATE / CHANNEL_CREATE / THREAD_CREATE."""

    channels: dict[Snowflake, Channel] = attrs.field(factory=dict)

    def add(self, channel: Channel) -> None:
        """Remember (or update) a channel."""
        self.channels[channel.id] = channel

    def remove(self, channel_id: Snowflake) -> list[Snowflake]:
        """Forget a deleted channel and its threads; returns every id forgotten."""
        gone = [channel_id] + [
            c.id for c in self.channels.values() if c.parent_id == channel_id and c.is_thread
        ]
        for cid in gone:
            self.channels.pop(cid, None)
        return gone

    def get(self, channel_id: Snowflake) -> Channel | None:
        """The channel, if seen."""
        return self.channels.get(channel_id)

    def parent_of(self, channel_id: Snowflake) -> Snowflake | None:
        """The parent channel of a thread, else None."""
        ch = self.channels.get(channel_id)
        return ch.parent_id if ch is not None and ch.is_thread else None

    def is_thread(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known thread."""
        ch = self.channels.get(channel_id)
        return ch is not None and ch.is_thread

    def is_group_dm(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known group DM (commands there need a mention)."""
        ch = self.channels.get(channel_id)
        return ch is not None and ch.type == ChannelType.GROUP_DM


class SettingsSource:
    """The current settings: the file and environment, plus runtime config from the store.

    Runtime changes (this process's, or another's `picortex config set`, which the store
    actor notices) are picked up on the next `refresh`, by comparing the store's
    `config_version`: an integer compare per message, no SQLite call.
    """

    def __init__(self, base: Settings, store: Store | StoreActor) -> None:
        self._base = base
        self._store = store
        self._version: object = None
        self._stored: dict[str, str] | None = None
        self._current = base
        self._listeners: list[Callable[[Settings], None]] = []
        self.refresh(force=True)

    def subscribe(self, listener: Callable[[Settings], None]) -> None:
        """Call `listener(settings)` after each change of the runtime config."""
        self._listeners.append(listener)

    def refresh(self, *, force: bool = False) -> Settings:
        """Re-read runtime config when another connection changed the database (or `force`)."""
        store = self._store
        # A bare Store (tools, tests) is watched through SQLite's data_version instead.
        version = (
            store.config_version if isinstance(store, StoreActor) else store.pragma("data_version")
        )
        if not force and version == self._version:
            return self._current
        self._version = version
        stored = self._store.runtime_config()
        if stored == self._stored:
            return self._current
        try:
            current = self._base.with_runtime(stored)
        except Exception as exc:  # a bad stored value keeps the last good settings
            logger.warning("runtime config not applied: %s", exc)
            return self._current
        self._stored = stored
        self._current = current
        for listener in self._listeners:
            try:
                listener(current)
            except Exception:
                logger.exception("a runtime config listener failed")
        return current

    def __call__(self) -> Settings:
        return self._current


@attrs.define
class TriggerBook:
    """The trigger log rings, shared by all channels (read by `picortex status`)."""

    log: TriggerLog = attrs.field(factory=TriggerLog)

    def add(self, entry: TriggerEntry) -> None:
        """Append a trigger."""
        self.log = self.log.add(entry)

    # How many leading context lines of an entry are the prior conversation (the rest are
    # follow-ups), so a rebuilt context replaces the old one instead of piling up.
    prior: dict[Snowflake, int] = attrs.field(factory=dict)

    def follow_up(self, parent_id: Snowflake, line: str) -> None:
        """Join a follow-up to its trigger's context."""
        self.log = self.log.add_follow_up(parent_id, line)

    def set_context(self, entry_id: Snowflake, lines: Sequence[str]) -> None:
        """Record the prior conversation given to the model for entry `entry_id`."""
        old = self.prior.get(entry_id, 0)

        def put(buffer: tuple[TriggerEntry, ...]) -> tuple[TriggerEntry, ...]:
            return tuple(
                attrs.evolve(e, context=(*lines, *e.context[old:])) if e.id == entry_id else e
                for e in buffer
            )

        if self.log.get(entry_id) is None:
            return
        self.log = attrs.evolve(
            self.log, trusted=put(self.log.trusted), untrusted=put(self.log.untrusted)
        )
        self.prior[entry_id] = len(lines)
        if len(self.prior) > 2 * (self.log.trusted_capacity + self.log.untrusted_capacity):
            self.prior = {k: v for k, v in self.prior.items() if self.log.get(k) is not None}


@attrs.define
class Pipeline:
    """The one object the app builds that provides every narrow client of the channel side
    (`ChannelClients`, `PersonaClients`, `InteractionClients`, `PollClients`); the router
    holds it whole."""

    settings: SettingsSource
    store: StoreActor
    rest: Rest
    cache: ContextCache
    llm: LLMActor
    events: EventSink
    bot: BotIdentity
    registry: ChannelRegistry
    triggers: TriggerBook
    home: Path
    faults: Faults | None = None
    personas: PersonaLoader | None = None
    # Polls run in a nursery that outlives channel actors, so an idle exit keeps the timer.
    spawn: Callable[..., None] | None = None
    dm_channels: dict[Snowflake, Snowflake] = attrs.field(factory=dict)
    # Called when Discord refuses the token (HTTP 401): the app stops with exit code 3.
    fatal: Callable[[FatalDiscordError], None] | None = None
    answer_timeout: float = ANSWER_TIMEOUT_SECONDS
    crash_drain_seconds: float = CRASH_DRAIN_SECONDS
    # When each message reached its channel's mailbox (set by the router, taken by the
    # actor): the continuation window counts from arrival, not from when it was handled.
    arrivals: dict[Snowflake, float] = attrs.field(factory=dict)
    # Which messages are in hand and which are handled: a decision is final only once made.
    handled: HandledLedger = attrs.field(
        default=attrs.Factory(lambda self: HandledLedger(self.store), takes_self=True)
    )

    def finish(self, message: Message | Interaction) -> None:
        """The decision on `message` is final: it is never handled again."""
        self.handled.finish((message.id,), message.channel_id, message.guild_id)

    # Slash interactions not answered yet, by id: whoever comes first answers Discord within
    # its 3 s, the channel actor with a response or the router's deadline with a deferral.
    acks: dict[Snowflake, Any] = attrs.field(factory=dict)

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: Snowflake | None, now: float
    ) -> cmds.StartPoll | None:
        """Store what a command changed (see `apply_changes`); the poll it starts, if any."""
        return await apply_changes(
            changes,
            store=self.store,
            settings=self.settings,
            home=self.home,
            chat_id=chat_id,
            now=now,
        )

    def workspace_of(self, message: Message) -> str:
        """The budget workspace: the guild id, or `dm`."""
        return str(message.guild_id) if message.guild_id is not None else "dm"

    def is_trusted(self, user_id: Snowflake) -> bool:
        """Whether someone's words may be repeated to the model unmarked: the bot itself,
        the owner or anyone on the trust list (an unreadable store trusts no one)."""
        if user_id == self.bot.user_id or user_id == self.settings().owner_id:
            return True
        try:
            return self.store.get_tier(user_id) is not None
        except Exception:
            return False

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

    def record_failure(
        self,
        *,
        stage: str,
        workspace: str,
        persona: str | None,
        signal_id: Snowflake | None,
        error: str,
        stack_trace: str | None,
    ) -> None:
        """A failed invocation: a `cortex.invocation_failed` event and an error row (SPEC 9)."""
        error = redact(error)[:ERROR_MESSAGE_MAX_CHARS]
        trace = redact(stack_trace) if stack_trace else None
        created_at = time.time()

        def emit(row_id: object) -> None:
            self.events.emit(
                "cortex.invocation_failed",
                stage=stage,
                workspace=workspace,
                persona=persona,
                signal_id=signal_id,
                error=error,
                error_id=row_id,
            )

        # The event is written once the row is committed, so it can name the row's id.
        try:
            self.store.submit(
                lambda db: db.add_invocation_error(
                    workspace_id=workspace,
                    persona=persona or DEFAULT_PERSONA,
                    signal_id="" if signal_id is None else str(signal_id),
                    stage=stage,
                    error_message=error,
                    stack_trace=trace,
                    created_at=created_at,
                ),
                on_done=emit,
            )
        except Exception:
            logger.exception("could not store an invocation error")
            emit(None)

    @asynccontextmanager
    async def typing(
        self,
        channel_id: Snowflake,
        enabled: bool = True,
        *,
        spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None,
    ) -> AsyncIterator[trio.Event]:
        """Show the typing indicator in `channel_id` while the block runs, from its start.

        Yields an event set once the first typing request is on its way to Discord (or
        failed), so a ready answer can make sure the indicator goes first; typing never
        fails an answer. With `spawn` (a task starter that outlives the block) a typing
        request still in flight when the block ends finishes in the background instead of
        being cut off, so its connection stays open for the next request.
        """
        shown = trio.Event()
        if not enabled:
            shown.set()
            yield shown
            return
        stop = trio.Event()

        async def keep_typing() -> None:
            try:
                while not stop.is_set():
                    try:
                        await self.rest.trigger_typing(channel_id, on_sent=shown.set)
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
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_typing)
            try:
                yield shown
            finally:
                nursery.cancel_scope.cancel()

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
            if isinstance(exc, FatalDiscordError) and self.fatal is not None:
                self.fatal(exc)
            self.events.emit(
                "reply",
                command=command,
                mode=plan.target,
                target=target_channel or plan.dm_user_id,
                trigger_id=trigger_id,
                result="failed",
                error=redact(f"{type(exc).__name__}: {exc}")[:ERROR_MESSAGE_MAX_CHARS],
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
    ) -> Streamed:
        """Make the model call streamed and show the answer as it is written (SPEC 16).

        `plan` is awaited at the first post (where the reply goes), unless `surface` says
        where the answer is written instead (a slash `ask`). The call is one
        request, never retried; a stream cut midway leaves what arrived plus one line
        saying so. A reply that could not be posted cancels the call. Logs the `reply`
        event; the caller records failures.
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
                result = await self.llm.complete(request, on_text=reply.feed)
                if result.ok:
                    reply.finish(result.text)
                elif reply.text:
                    reply.finish(with_cut_notice(reply.text))
                else:
                    reply.stop()
        failure = reply.failure
        if failure is not None:
            if isinstance(failure, FatalDiscordError) and self.fatal is not None:
                self.fatal(failure)
            self.events.emit(
                "reply",
                command=None,
                mode=surface.target,
                target=surface.channel_id,
                trigger_id=trigger_id,
                result="failed",
                error=redact(f"{type(failure).__name__}: {failure}")[:ERROR_MESSAGE_MAX_CHARS],
                parts=len(surface.message_ids),
                streamed=True,
            )
        elif reply.started:
            self.events.emit(
                "reply",
                command=None,
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


class AnswerSurface(ReplySurface, Protocol):
    """Where a streamed answer is written, and what the `reply` event says about it."""

    target: str
    channel_id: Snowflake | None
    message_ids: list[Snowflake]


@attrs.frozen
class Streamed:
    """How a streamed answer went: the call's result (None when the call was cancelled
    because the reply could not be posted), the reply, and where it went."""

    result: LLMResult | None
    reply: StreamedReply
    surface: AnswerSurface

    @property
    def message_ids(self) -> list[Snowflake]:
        """The ids of the reply's messages."""
        return self.surface.message_ids


def reply_nonce(trigger_id: Snowflake | None, part: str, index: int) -> dict[str, str]:
    """The enforced nonce of one chunk of one post made for `trigger_id`.

    Derived from the trigger, so the same chunk posted again (a trigger handled again after a
    kill that came between the post and its handled mark) is returned by Discord instead of
    posted twice. `part` is one letter telling a trigger's posts apart: `a` an answer, `c` a
    command's reply, `r` a poll's result. At most 25 characters: a snowflake, the letter and
    the chunk number.
    """
    if trigger_id is None:
        return {}
    return {"nonce": f"{trigger_id}{part}{index}"}


def failure_text(exc: BaseException) -> tuple[str, str]:
    """An exception as (one-line message, stack trace), both redacted."""
    return (
        redact(f"{type(exc).__name__}: {exc}")[:ERROR_MESSAGE_MAX_CHARS],
        redact("".join(traceback.format_exception(exc))),
    )


def lines_text(lines: Sequence[str]) -> str:
    """Context lines as one block for a prompt."""
    return "\n".join(lines)
