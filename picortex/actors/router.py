"""The router: normalizes gateway dispatches, drops replays, feeds the cache and channel mailboxes.

The gateway reader calls `on_dispatch` synchronously; it only queues (never blocks, so a busy
bot cannot starve the heartbeat). The router's own task then deduplicates by message id
(persisted, so a restart does not answer twice), applies live cache updates, and hands each
message to its channel's mailbox, starting the channel actor on demand.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Final

import trio

from picortex.actors import interactions, persona_answer
from picortex.actors.channel import ChannelActor
from picortex.actors.interactions import register_commands
from picortex.actors.pipeline import Pipeline
from picortex.discord.normalize import normalize
from picortex.runtime.mailbox import Mailbox
from picortex.runtime.supervisor import ChildSpec, DynamicSupervisor, Restart
from picortex.types import (
    ChannelCreate,
    GuildCreate,
    Interaction,
    InteractionType,
    Message,
    MessageDelete,
    MessageUpdate,
    NormalizeError,
    ReactionEvent,
    Ready,
    Snowflake,
    ThreadListSync,
)

logger = logging.getLogger(__name__)

# Dispatches waiting for the router; a burst of this size is queued, beyond it counted.
ROUTER_QUEUE: Final = 10_000
# Messages waiting in one channel's mailbox.
CHANNEL_MAILBOX: Final = 500
# Recently seen message ids kept in memory in front of the seen-events table.
SEEN_MEMORY: Final = 50_000
# Seen-event rows older than this are pruned: Discord never replays that far back.
SEEN_KEEP_SECONDS: Final = 7 * 24 * 3600
PRUNE_EVERY: Final = 10_000
# Dispatches the router takes per wake-up at most: a burst is drained in batches this big.
ROUTER_BATCH: Final = 64
# Recall looks back 7 days (SPEC 8); keep a little more, then let the table shrink.
MEMORY_KEEP_SECONDS: Final = 14 * 24 * 3600


class Router:
    """Routes gateway dispatches; see the module docstring."""

    def __init__(self, pipe: Pipeline, channels: DynamicSupervisor) -> None:
        self._pipe = pipe
        self._channels = channels
        self._inbox: Mailbox[tuple[str, Any]] = Mailbox(ROUTER_QUEUE, name="router")
        self._mailboxes: dict[Snowflake, Mailbox[Message | Interaction]] = {}
        self._seen: OrderedDict[Snowflake, None] = OrderedDict()
        self._routed = 0
        self.replays_dropped = 0

    @property
    def inbox(self) -> Mailbox[tuple[str, Any]]:
        """The router's own mailbox (for the supervisor)."""
        return self._inbox

    def on_dispatch(self, name: str, data: Any) -> None:
        """Called by the gateway reader for every dispatch; never blocks."""
        if not self._inbox.send_nowait((name, data)):
            self._pipe.events.emit(
                "error", scope="router", message=f"router queue full: {name} dropped"
            )

    def mailbox_depths(self) -> list[dict[str, object]]:
        """Each channel with a running actor or queued messages, and its depth (for status)."""
        found: list[dict[str, object]] = []
        for cid, mb in self._mailboxes.items():
            if mb.depth or self._channels.get(f"channel-{cid}") is not None:
                channel = self._pipe.registry.get(cid)
                name = channel.name if channel is not None and channel.name else "dm"
                found.append({"channel_id": str(cid), "name": name, "depth": mb.depth})
        return found

    def mailbox_overflows(self) -> int:
        """Messages refused by full channel mailboxes so far."""
        return sum(mb.overflows for mb in self._mailboxes.values())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Route queued dispatches until cancelled."""
        # After a restart of the channels supervisor, messages still wait in mailboxes whose
        # actors are gone: give each such channel an actor again before routing anything new.
        for channel_id, mailbox in list(self._mailboxes.items()):
            if mailbox.depth:
                await self._ensure_actor(channel_id, mailbox)
        task_status.started()
        inbox = self._inbox
        while True:
            name, data = await inbox.receive()
            await self._route(name, data)
            inbox.done()
            # In a burst, take what queued up meanwhile without a scheduler round per dispatch
            # (one costs about as much as normalizing the message); at most ROUTER_BATCH at a
            # time, so the router still yields to the other actors now and then.
            for _ in range(ROUTER_BATCH - 1):
                try:
                    name, data = inbox.receive_nowait()
                except trio.WouldBlock:
                    break
                await self._route(name, data)
                inbox.done()

    async def _route(self, name: str, data: Any) -> None:
        pipe = self._pipe
        event = normalize(name, data)
        if event is None:
            return
        if isinstance(event, NormalizeError):
            pipe.events.emit(
                "error", scope="normalize", event_name=event.event, message=event.reason
            )
            return
        if isinstance(event, Message):
            if event.author.id == pipe.bot.user_id:
                # Our own replies only feed the context; the pipeline would ignore them
                # anyway (SPEC 5 step 1), so they cost no mailbox hop and no database write.
                pipe.cache.on_message(event)
                return
            if self._is_replay(event.id):
                self.replays_dropped += 1
                if name == "MESSAGE_CREATE":
                    pipe.events.emit(
                        "decision",
                        message_id=event.id,
                        channel_id=event.channel_id,
                        guild_id=event.guild_id,
                        author_id=event.author.id,
                        outcome="ignore",
                        reason="replayed event already handled",
                    )
                return
            pipe.cache.on_message(event)
            await self._deliver(event)
        elif isinstance(event, Interaction):
            # A replayed interaction was answered (or is past answering) already.
            if not self._is_replay(event.id):
                if event.type == InteractionType.APPLICATION_COMMAND:
                    interactions.expect(
                        pipe,
                        event,
                        ephemeral=interactions.predicted_ephemeral(pipe, event),
                        arrived=trio.current_time(),
                    )
                await self._deliver(event)
        elif isinstance(event, MessageUpdate):
            pipe.cache.on_update(event)
            # Recall must never show the text as it was before an edit.
            persona_answer.reindex(pipe, event)
        elif isinstance(event, MessageDelete):
            pipe.cache.on_delete(event)
            # A deleted message (a pasted secret, say) must not come back in a recall.
            persona_answer.forget(pipe, [event.id])
        elif isinstance(event, ReactionEvent):
            self._reaction(event)
        elif isinstance(event, Ready):
            pipe.bot.user_id = event.user.id
            pipe.bot.username = event.user.username
            # A new session (not a RESUME): events may have been missed since the last one.
            pipe.cache.on_session_start()
            if event.application_id is not None and pipe.spawn is not None:
                pipe.spawn(register_commands, pipe, event.application_id)
        elif isinstance(event, GuildCreate):
            for channel in (*event.channels, *event.threads):
                pipe.registry.add(channel)
        elif isinstance(event, ChannelCreate):
            pipe.registry.add(event.channel)
        elif isinstance(event, ThreadListSync):
            for thread in event.threads:
                pipe.registry.add(thread)

    def _is_replay(self, message_id: Snowflake) -> bool:
        """True when the message was handled before (in memory, else in the store)."""
        if message_id in self._seen:
            return True
        self._seen[message_id] = None
        if len(self._seen) > SEEN_MEMORY:
            self._seen.popitem(last=False)
        now = time.time()
        try:
            new = self._pipe.store.mark_seen(message_id, now)
        except Exception:
            logger.exception("seen-events table unavailable; relying on memory")
            return False
        self._routed += 1
        if self._routed % PRUNE_EVERY == 0:
            self._pipe.store.prune_seen(now - SEEN_KEEP_SECONDS)
            self._pipe.store.prune_memory(now - MEMORY_KEEP_SECONDS)
        return not new

    def _reaction(self, event: ReactionEvent) -> None:
        pipe = self._pipe
        settings = pipe.settings()
        trusted = (settings.owner_id is not None and event.user_id == settings.owner_id) or (
            pipe.store.get_tier(event.user_id) is not None
        )
        if trusted and event.user_id != pipe.bot.user_id:
            pipe.events.emit(
                "reaction",
                action="add" if event.added else "remove",
                message_id=event.message_id,
                channel_id=event.channel_id,
                user_id=event.user_id,
                emoji=event.emoji,
            )

    async def _deliver(self, message: Message | Interaction) -> None:
        channel_id = message.channel_id
        mailbox = self._mailboxes.get(channel_id)
        if mailbox is None:
            mailbox = Mailbox(CHANNEL_MAILBOX, name=f"channel-{channel_id}")
            self._mailboxes[channel_id] = mailbox
        # Stamped before queueing: the continuation window counts from arrival.
        self._pipe.arrivals[message.id] = trio.current_time()
        if not mailbox.send_nowait(message):
            self._pipe.arrivals.pop(message.id, None)
            self._pipe.events.emit(
                "error",
                scope="mailbox",
                channel_id=channel_id,
                message_id=message.id,
                message="channel mailbox full: message not handled",
            )
            return
        await self._ensure_actor(channel_id, mailbox)

    async def _ensure_actor(
        self, channel_id: Snowflake, mailbox: Mailbox[Message | Interaction]
    ) -> None:
        """Start the channel's actor unless it is running."""
        name = f"channel-{channel_id}"
        if self._channels.get(name) is None:
            actor = ChannelActor(channel_id, mailbox, self._pipe)
            spec = ChildSpec(name, actor.run, restart=Restart.TRANSIENT, mailbox=mailbox)
            try:
                await self._channels.start_child(spec)
            except Exception as exc:
                logger.error("channel actor %s did not start: %s", channel_id, exc)
