"""The router: normalizes gateway dispatches, drops replays, feeds the cache and channel mailboxes.

The gateway reader calls `on_dispatch` synchronously; it only queues (never blocks, so a busy
bot cannot starve the heartbeat). The router's own task then deduplicates by message id
(persisted by the store actor in groups, so a restart does not answer twice), applies live
cache updates, decides chatter inline (picortex/core/chatter.py: counted, never logged one by
one, never stored) and hands every other message to its channel's mailbox, starting the
channel actor on demand. A trusted author's chatter is decided inline too when its channel
holds no open request it could continue: stored for recall and matched against the personas
as the channel actor would, counted, not logged. Mailboxes of channels that went quiet are
released.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import trio

from picortex.actors import chats, interactions, persona_answer
from picortex.actors.delivery import ChannelReply, Delivery
from picortex.actors.interaction_sink import InteractionSink
from picortex.actors.interactions import register_commands
from picortex.actors.router_clients import RouterRoles
from picortex.actors.shard_fence import ShardFence
from picortex.actors.slash_request import slash_request
from picortex.core import continuation as cont
from picortex.core.access import role_tier
from picortex.core.chatter import QUIET_MODES, is_chatter
from picortex.core.commands import strip_mention
from picortex.core.trust import is_trusted, should_ignore
from picortex.discord.fence import LEFT_TO_NEXT_HOLDER
from picortex.discord.normalize import normalize
from picortex.runtime.mailbox import Mailbox
from picortex.runtime.supervisor import ChildSpec, RestartPolicy
from picortex.types import (
    ChannelCreate,
    ChannelDelete,
    GuildCreate,
    Interaction,
    InteractionType,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageUpdate,
    NormalizeError,
    ReactionEvent,
    Ready,
    Snowflake,
    ThreadListSync,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# Dispatches waiting for the router; a burst of this size is queued, beyond it counted.
ROUTER_QUEUE: Final = 10_000
# Messages waiting in one channel's mailbox.
CHANNEL_MAILBOX: Final = 500
# How long the router waits for GET /users/@me after a RESUME in a new process.
IDENTITY_TIMEOUT_SECONDS: Final = 30.0
# Dispatches the router takes per wake-up at most: a burst is drained in batches this big.
# More than one socket read of the gateway brings (64 KiB: a few hundred compressed frames),
# so the router keeps pace with a reader that hands on a whole read per wake-up.
ROUTER_BATCH: Final = 1024
# How often chatter and routing counts go to the action log as one `ingest` event (when
# anything arrived), and idle channels' mailboxes are released.
INGEST_EVERY_SECONDS: Final = 60.0
# Cached messages searched for a deleted one's context line in the trigger log: the context
# a trigger shows is made of a channel's most recent messages.
TRIGGER_CONTEXT_SCAN: Final = 500


class ChannelWorker(Protocol):
    """A channel's actor as the router sees it (`picortex.actors.channel.ChannelActor`)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Handle the channel's mailbox until idle."""
        ...


class ChannelActorFactory(Protocol):
    """Makes the actor of one channel around its mailbox (built by the app)."""

    def __call__(
        self,
        channel_id: Snowflake,
        mailbox: Mailbox[Delivery],
        windows: Callable[[cont.ContinuationState], None],
    ) -> ChannelWorker:
        """`windows` is told each new state of the channel's open requests."""
        ...


class ChannelSupervisor(Protocol):
    """The dynamic supervisor of the channel actors (`DynamicSupervisor`)."""

    def get(self, name: str) -> ChildSpec | None:
        """The spec of the supervised child `name` (running or about to restart), or None."""
        ...

    async def start_child(self, spec: ChildSpec) -> object:
        """Start a child and wait until it is ready."""
        ...


class Router:
    """Routes gateway dispatches; see the module docstring.

    Args:
        roles: what the router reads, feeds and posts through, by role (built by the app).
        channels: the supervisor the channel actors run under.
        channel_actor: makes a channel's actor around its mailbox.
        catch_up: run after a fresh IDENTIFY of a shard (its id; None: not known): answers
            the triggers missed in that shard's channels (SPEC 4).
    """

    def __init__(
        self,
        roles: RouterRoles,
        channels: ChannelSupervisor,
        channel_actor: ChannelActorFactory,
        *,
        catch_up: Callable[[int | None], Awaitable[None]] | None = None,
        fence: ShardFence | None = None,
    ) -> None:
        self._fence = fence
        self._reads = roles.reads
        self._feeds = roles.feeds
        self._posting = roles.posting
        self._slash = roles.slash
        self._personas = roles.personas
        self._channels = channels
        self._new_actor = channel_actor
        self._inbox: Mailbox[tuple[str, Any, int | None]] = Mailbox(ROUTER_QUEUE, name="router")
        self._mailboxes: dict[Snowflake, Mailbox[Delivery]] = {}
        # Each channel's open requests, as its latest actor last told (immutable values).
        self._windows: dict[Snowflake, cont.ContinuationState] = {}
        self.replays_dropped = 0
        self._catch_up = catch_up
        self.chatter = 0  # messages decided inline as chatter (trusted chatter included)
        self.trusted_chatter = 0  # of which from trusted authors, stored for recall
        self.delivered = 0  # messages handed to a channel mailbox
        self._reported = (0, 0)
        self._report_at = 0.0
        self._released_overflows = 0  # overflows of mailboxes since released
        self._waiting = False  # the router's task waits for its inbox, nothing in hand

    @property
    def inbox(self) -> Mailbox[tuple[str, Any, int | None]]:
        """The router's own mailbox (for the supervisor)."""
        return self._inbox

    def on_dispatch(self, name: str, data: Any, seq: int | None = None) -> None:
        """Called by the gateway reader for every dispatch, with its `seq`; never blocks.

        Chatter is decided right here when the router's task has nothing queued or in hand
        (so order holds): no hop through the inbox. Everything else is queued for the task
        (a message normalized here goes as it is: nothing is normalized twice). The `seq`
        stays with each message in hand, so the persisted session resumes before anything
        not yet final.
        """
        if name == "MESSAGE_CREATE" and self._waiting and self._inbox.settled:
            event = normalize(name, data)
            if type(event) is Message:
                if self._route_chatter_now(event, seq):
                    return
                data = event
        if not self._inbox.send_nowait((name, data, seq)):
            self._feeds.events.emit(
                "error", scope="router", message=f"router queue full: {name} dropped"
            )

    def mailbox_depths(self) -> list[dict[str, object]]:
        """Each channel with a running actor or queued messages, and its depth (for status)."""
        found: list[dict[str, object]] = []
        for cid, mb in self._mailboxes.items():
            if mb.depth or self._channels.get(f"channel-{cid}") is not None:
                channel = self._feeds.registry.get(cid)
                name = channel.name if channel is not None and channel.name else "dm"
                found.append({"channel_id": str(cid), "name": name, "depth": mb.depth})
        return found

    def mailbox_overflows(self) -> int:
        """Messages refused by full channel mailboxes so far."""
        return self._released_overflows + sum(mb.overflows for mb in self._mailboxes.values())

    def ingest_counts(self) -> dict[str, int]:
        """Messages seen so far by path (for `picortex status`)."""
        return {
            "chatter": self.chatter,
            "trusted_chatter": self.trusted_chatter,
            "delivered": self.delivered,
            "replays_dropped": self.replays_dropped,
            "mailboxes": len(self._mailboxes),
        }

    def release_idle(self) -> int:
        """Forget the mailboxes of channels with no actor and nothing queued; how many."""
        idle = [
            cid
            for cid, mb in self._mailboxes.items()
            if not mb.depth and mb.in_hand is None and self._channels.get(f"channel-{cid}") is None
        ]
        for cid in idle:
            self._released_overflows += self._mailboxes.pop(cid).overflows
            self._windows.pop(cid, None)
        return len(idle)

    def _report(self) -> None:
        """One `ingest` event with what arrived since the last one (none when nothing did)."""
        now = trio.current_time()
        counts = (self.chatter, self.delivered)
        chatter, delivered = (c - r for c, r in zip(counts, self._reported, strict=True))
        if chatter or delivered:
            self._feeds.events.emit(
                "ingest",
                chatter=chatter,
                delivered=delivered,
                seconds=round(now - self._report_at, 1),
                mailboxes=len(self._mailboxes),
            )
        self._reported = counts
        self._report_at = now

    async def _housekeeping(self) -> None:
        while True:
            await trio.sleep(INGEST_EVERY_SECONDS)
            self._report()
            self.release_idle()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Route queued dispatches until cancelled."""
        await self._learn_identity()
        # After a restart of the channels supervisor, messages still wait in mailboxes whose
        # actors are gone: give each such channel an actor again before routing anything new.
        for channel_id, mailbox in list(self._mailboxes.items()):
            if mailbox.depth:
                await self._ensure_actor(channel_id, mailbox)
        self._report_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._housekeeping)
            task_status.started()
            await self._loop()

    async def _loop(self) -> None:
        inbox = self._inbox
        while True:
            self._waiting = True
            try:
                name, data, seq = await inbox.receive()
            finally:
                self._waiting = False
            self._reads.settings.refresh()
            await self._route(name, data, seq)
            inbox.done()
            # In a burst, take what queued up meanwhile without a scheduler round per dispatch
            # (one costs about as much as normalizing the message); at most ROUTER_BATCH at a
            # time, so the router still yields to the other actors now and then.
            for _ in range(ROUTER_BATCH - 1):
                try:
                    name, data, seq = inbox.receive_nowait()
                except trio.WouldBlock:
                    break
                await self._route(name, data, seq)
                inbox.done()

    async def _route(self, name: str, data: Any, seq: int | None = None) -> None:
        try:
            await self._route_event(name, data, seq)
        finally:
            self._feeds.handled.routed(seq)

    async def _route_event(self, name: str, data: Any, seq: int | None) -> None:
        # A message the reader's inline path normalized already comes as a `Message`.
        event = data if type(data) is Message else normalize(name, data)
        if event is None:
            return
        if isinstance(event, NormalizeError):
            self._feeds.events.emit(
                "error", scope="normalize", event_name=event.event, message=event.reason
            )
            return
        if isinstance(event, Message):
            if event.author.id == self._reads.bot.user_id:
                # Our own replies feed the context and recall (SPEC 8); the pipeline would
                # ignore them anyway (SPEC 5 step 1), so they cost no mailbox hop.
                self._feeds.cache.on_message(event)
                if name == "MESSAGE_CREATE":
                    self._remember_answer(event)
                    # Before any later message reaches its channel: see AnswersSeen.
                    self._feeds.answers_seen.saw(event)
                return
            store = self._reads.store
            seen = store.seen(event.id, event.guild_id)
            if seen is None:  # an id older than memory holds: only the database knows
                seen = await store.was_handled(event.id, event.guild_id)
            if name == "MESSAGE_CREATE" and self._decide_chatter(event, seen):
                return
            if seen or not self._feeds.handled.take(event.id, seq):
                self.replays_dropped += 1
                if name == "MESSAGE_CREATE":
                    self._feeds.events.emit(
                        "decision",
                        message_id=event.id,
                        channel_id=event.channel_id,
                        guild_id=event.guild_id,
                        author_id=event.author.id,
                        outcome="ignore",
                        reason="replayed event already handled",
                    )
                return
            # In hand: marked handled (persisted with the store's next group) only once its
            # decision is final, so a kill before that leaves it to be handled again.
            self._feeds.cache.on_message(event)
            await self._deliver(self._message_delivery(event, seq))
        elif isinstance(event, Interaction):
            # A replayed interaction was answered (or is past answering) already: handled
            # once taken (its token lasts minutes, a restart's replay comes after).
            store = self._reads.store
            seen = store.seen(event.id, event.guild_id)
            if seen is None:
                seen = await store.was_handled(event.id, event.guild_id)
            if seen or not self._feeds.handled.take(event.id, seq):
                self.replays_dropped += 1
            elif self._fence is not None and not self._fence.request(event.guild_id).allows():
                # Its shard's lease ended as it came (SPEC 17): not marked, so the shard's next
                # holder, resuming below its seq, answers it.
                self._feeds.handled.release((event.id,))
                self._feeds.events.emit(
                    "decision",
                    interaction_id=event.id,
                    channel_id=event.channel_id,
                    guild_id=event.guild_id,
                    outcome="skip",
                    reason=LEFT_TO_NEXT_HOLDER,
                )
            else:
                self._feeds.handled.finish((event.id,), event.channel_id, event.guild_id)
                await self._deliver(self._interaction_delivery(event, seq))
        elif isinstance(event, MessageUpdate):
            self._feeds.cache.on_update(event)
            # Recall must never show the text as it was before an edit.
            persona_answer.reindex(self._personas, event)
        elif isinstance(event, MessageDelete):
            self._forget_triggers(event.channel_id, (event.id,))
            self._feeds.cache.on_delete(event)
            # A deleted message (a pasted secret, say) must not come back in a recall.
            persona_answer.forget(self._personas, [event.id])
        elif isinstance(event, MessageDeleteBulk):
            # A purge: the messages leave the trigger log, the cache and memory with their
            # observations.
            self._forget_triggers(event.channel_id, event.ids)
            self._feeds.cache.on_delete(event)
            persona_answer.forget(self._personas, event.ids)
        elif isinstance(event, ChannelDelete):
            self._channel_deleted(event)
        elif isinstance(event, ReactionEvent):
            self._reaction(event)
        elif isinstance(event, Ready):
            self._reads.bot.user_id = event.user.id
            self._reads.bot.username = event.user.username
            # A new session (not a RESUME) of one shard: events of its guilds may have been
            # missed since the last one.
            shard_id = self._feeds.handled.new_session(seq)
            self._feeds.cache.on_session_start()
            if self._catch_up is not None:
                self._posting.spawn(self._catch_up, shard_id)
            if event.application_id is not None:
                self._posting.spawn(register_commands, self._slash, event.application_id)
        elif isinstance(event, GuildCreate):
            self._feeds.registry.name_guild(event.id, event.name)
            for channel in (*event.channels, *event.threads):
                self._feeds.registry.add(channel)
        elif isinstance(event, ChannelCreate):
            self._feeds.registry.add(event.channel)
        elif isinstance(event, ThreadListSync):
            for thread in event.threads:
                self._feeds.registry.add(thread)

    def _route_chatter_now(self, event: Message, seq: int | None) -> bool:
        """Decide a MESSAGE_CREATE inline if it is chatter; False: the task must route it."""
        if event.author.id == self._reads.bot.user_id:
            return False
        seen = self._reads.store.seen(event.id, event.guild_id)
        if seen is None:  # only the database knows: the task asks it
            return False
        self._reads.settings.refresh()
        if not self._decide_chatter(event, seen):
            return False
        self._feeds.handled.routed(seq)
        return True

    def _decide_chatter(self, event: Message, seen: bool) -> bool:
        """Decide a MESSAGE_CREATE here if it is chatter (a replay of it included)."""
        if event.guild_id is not None:
            self._feeds.registry.note_roles(event.author.id, event.member_roles)
        chatter = self._chatter(event)
        if chatter is _STRANGER_CHATTER:
            # Decided here: counted, fed to the context, never logged one by one and never
            # stored (a replay of it is as harmless as it is: nothing was answered).
            if seen:
                self.replays_dropped += 1
                return True
            self._reads.store.note_seen(event.id)
            self.chatter += 1
            self._feeds.cache.on_message(event)
            return True
        if chatter is _TRUSTED_CHATTER and not seen and not self._feeds.handled.known(event.id):
            self._feeds.cache.on_message(event)
            self._trusted_chatter(event)
            return True
        return False

    async def _learn_identity(self) -> None:
        """Who the bot is, before routing: READY says so, but a restarted process that RESUMEd
        its session gets no READY, and replayed messages must still see their mentions."""
        bot = self._reads.bot
        if bot.user_id is not None:
            return
        with trio.move_on_after(IDENTITY_TIMEOUT_SECONDS):
            try:
                me = await self._posting.rest.get_current_user()
                bot.user_id = int(me["id"])
                bot.username = str(me.get("username") or bot.username)
            except Exception as exc:
                logger.warning("GET /users/@me failed; the next READY tells who we are: %s", exc)

    async def deliver_catch_up(
        self, message: Message, on_taken: Callable[[], None] | None = None
    ) -> bool:
        """Hand a message found by catch-up to its channel, unless in hand or handled already.

        `on_taken` runs once it is taken, before its channel can decide it (the log's order).
        """
        if not self._feeds.handled.take(message.id, None):
            return False
        if on_taken is not None:
            on_taken()
        self._feeds.cache.on_message(message)
        await self._deliver(self._message_delivery(message, None))
        return True

    def _message_delivery(self, message: Message, seq: int | None) -> Delivery:
        """A message's request: answered by a reply in its channel (or a DM, as policy says)."""
        return Delivery(
            message, seq, trio.current_time(), ChannelReply(self._posting.replies, message)
        )

    def _interaction_delivery(self, interaction: Interaction, seq: int | None) -> Delivery:
        """An interaction's request: answered through the interaction, which is deferred by a
        timer if its channel is late (Discord waits 3 s for the first response)."""
        arrived = trio.current_time()
        command = interaction.type == InteractionType.APPLICATION_COMMAND
        ephemeral = command and interactions.predicted_ephemeral(self._slash, interaction)
        sink = InteractionSink(self._slash, interaction, ephemeral=ephemeral)
        if command:
            self._posting.spawn(sink.defer_at, arrived + interactions.DEFER_AFTER_SECONDS)
        return Delivery(slash_request(interaction), seq, arrived, sink)

    def _channel_deleted(self, event: ChannelDelete) -> None:
        """A channel or thread is gone: forget it (and its threads) in registry, cache, memory."""
        gone = self._feeds.registry.remove(event.id)
        home = self._reads.settings().home
        for channel_id in gone:
            self._feeds.cache.on_channel_delete(attrs.evolve(event, id=channel_id))
            # Queued for the store's next group; nothing is left to catch up there either.
            self._reads.store.forget_channel(channel_id, home)
        self._feeds.events.emit(
            "channel-delete",
            channel_id=event.id,
            guild_id=event.guild_id,
            parent_id=event.parent_id,
            type=event.type,
            forgotten_channel_ids=gone,
        )

    def _chatter(self, message: Message) -> object:
        """Whether a MESSAGE_CREATE is chatter (core.chatter) the router decides inline.

        Trust and mode come from memory. Returns `_STRANGER_CHATTER`, `_TRUSTED_CHATTER` or
        `_NOT_CHATTER`.
        """
        if message.guild_id is None:
            return _NOT_CHATTER  # a DM always addresses the bot
        settings = self._reads.settings()
        access = settings.access
        mode = chats.mode_choice(
            self._reads.store, self._feeds.registry, message, settings.attention, access
        ).mode
        if not is_chatter(message, bot_user_id=self._reads.bot.user_id, trusted=False, mode=mode):
            return _NOT_CHATTER
        # The bot's own messages never get here (routed before as answers).
        if not is_trusted(message.author.id, settings.owner_id, self._reads.store.get_tier) and (
            role_tier(message.member_roles, access.allow_roles) is None
        ):
            return _STRANGER_CHATTER
        return _TRUSTED_CHATTER if self._decides_trusted_chatter(message, mode) else _NOT_CHATTER

    def _decides_trusted_chatter(self, message: Message, mode: str) -> bool:
        """Whether a trusted author's message that does not address the bot may skip its mailbox.

        Only when its channel can do nothing with it beyond storing it: the mode never weighs
        it, and no request of the author is open there (nor can one be, with nothing queued,
        on its way or in hand), so it cannot continue one (SPEC 5 step 4). A guild message
        that does not mention the bot is never a command. Messages the pipeline ignores
        (bots, webhooks, system messages) keep their logged decision; with fault injection
        on, every message goes the mailbox's way; so does a message without text, which an
        attention rule of its own weighs (attachments only: answered in `always` alone).
        """
        if mode not in QUIET_MODES or self._reads.faults or not message.text.strip():
            return False
        if should_ignore(message, self._reads.bot.user_id) is not None:
            return False
        mailbox = self._mailboxes.get(message.channel_id)
        if mailbox is None:
            return True
        if not mailbox.settled:
            return False
        windows = self._windows.get(message.channel_id)
        return windows is None or (
            cont.window_for(windows, message.channel_id, message.author.id, message.sent_at) is None
        )

    def _forget_triggers(self, channel_id: Snowflake, ids: Sequence[Snowflake]) -> None:
        """Take deleted messages' text out of the trigger log (status, panel activity), the
        context lines it shows included; read from the cache before it drops them."""
        book = self._feeds.triggers
        if not book.has_channel(channel_id):
            return  # nothing of this channel is shown: no cache read on a busy purge
        book.forget(ids, self._feeds.cache.recent(channel_id, TRIGGER_CONTEXT_SCAN))

    def _trusted_chatter(self, message: Message) -> None:
        """Decide a trusted author's chatter inline: stored for recall, observed, counted.

        What its channel actor would do (SPEC 5, 8), less the mailbox hop, the task switch and
        the `decision` line: chatter nobody addressed to the bot is counted, not logged.
        """
        self.chatter += 1
        self.trusted_chatter += 1
        chats.remember(self._reads.store, message, message.text)
        if self._personas.personas is not None:
            text = strip_mention(message.text, self._reads.bot.user_id)
            persona_answer.observe(self._personas, message, text)
        self._feeds.handled.finish((message.id,), message.channel_id, message.guild_id)

    def _remember_answer(self, message: Message) -> None:
        """Store one of the bot's own answers for recall."""
        chats.remember(self._reads.store, message, message.content)

    def _reaction(self, event: ReactionEvent) -> None:
        owner = self._reads.settings().owner_id
        # The bot's own reactions (a poll's seeded options) are not logged.
        trusted = is_trusted(event.user_id, owner, self._reads.store.get_tier)
        if trusted and event.user_id != self._reads.bot.user_id:
            self._feeds.events.emit(
                "reaction",
                action="add" if event.added else "remove",
                message_id=event.message_id,
                channel_id=event.channel_id,
                user_id=event.user_id,
                emoji=event.emoji,
            )

    async def _deliver(self, delivery: Delivery) -> None:
        message = delivery.request
        channel_id = message.channel_id
        mailbox = self._mailboxes.get(channel_id)
        if mailbox is None:
            mailbox = Mailbox(CHANNEL_MAILBOX, name=f"channel-{channel_id}")
            self._mailboxes[channel_id] = mailbox
        self.delivered += 1
        if not mailbox.send_nowait(delivery):
            self._feeds.handled.release([message.id])
            self._feeds.events.emit(
                "error",
                scope="mailbox",
                channel_id=channel_id,
                message_id=message.id,
                message="channel mailbox full: message not handled",
            )
            return
        await self._ensure_actor(channel_id, mailbox)

    async def _ensure_actor(self, channel_id: Snowflake, mailbox: Mailbox[Delivery]) -> None:
        """Start the channel's actor unless it is running."""
        name = f"channel-{channel_id}"
        if self._channels.get(name) is None:
            actor = self._new_actor(
                channel_id, mailbox, functools.partial(self._windows.__setitem__, channel_id)
            )
            spec = ChildSpec(name, actor.run, restart=RestartPolicy.TRANSIENT, mailbox=mailbox)
            try:
                await self._channels.start_child(spec)
            except Exception as exc:
                logger.error("channel actor %s did not start: %s", channel_id, exc)


# What `_chatter` found.
_NOT_CHATTER: Final = object()
_STRANGER_CHATTER: Final = object()
_TRUSTED_CHATTER: Final = object()
