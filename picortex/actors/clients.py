"""The narrow clients that the router, catch-up and channel-side code are given, each naming
the few calls one job needs.

The router and the channel actors take their roles, each built whole by the app from the
parts of its `picortex.actors.pipeline.Pipeline` (`picortex.actors.router_clients`,
`picortex.actors.channel_roles`); catch-up is handed the `Pipeline`, typed by
`CatchUpClients`. Each user types what it gets by the protocol of what it calls, so a test
hands in a fake of just that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import trio

from picortex.store.queries import MemoryKeeping
from picortex.store.seen import ANY_GUILD
from picortex.types import (
    Channel,
    ChannelDelete,
    EventSink,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageUpdate,
    Snowflake,
)

if TYPE_CHECKING:
    from pathlib import Path

    from picortex.actors.answer_gate import AnswerGate
    from picortex.actors.stream_reply import AnswerSurface, Streamed
    from picortex.config import CompostSettings, Settings
    from picortex.core import policy
    from picortex.core.composting import Pause
    from picortex.core.llm import LLMRequest, LLMResult
    from picortex.errors import FatalDiscordError
    from picortex.store.store import ChatConfig, MemoryHit, UserAttention
    from picortex.types import BotIdentity


class FaultCheck(Protocol):
    """A fault point (`picortex.runtime.faults.FaultPoints`, set by PICORTEX_FAULT_INJECT)."""

    def check(self, actor: str, content: str) -> None:
        """Raise when a fault is configured for `actor` and `content`."""
        ...


class CurrentSettings(Protocol):
    """The settings in force: the file and environment plus runtime config."""

    def __call__(self) -> Settings:
        """The settings as last refreshed."""
        ...

    def refresh(self, *, force: bool = False) -> Settings:
        """Pick up a runtime config change, then the settings."""
        ...


class TierReader(Protocol):
    """One person's place on the trust list (SPEC 3), read from memory."""

    def get_tier(self, user_id: int) -> str | None:
        """The user's tier, or None when not on the list."""
        ...


class TrustReader(TierReader, Protocol):
    """The trust list (SPEC 3), read from memory."""

    def trust_list(self) -> list[tuple[int, str]]:
        """Every (user id, tier), by user id."""
        ...


class ChatConfigReader(Protocol):
    """Per-chat settings (attention mode, discriminator), read from memory."""

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        ...

    def get_user_attention(self, chat_id: int, user_id: int) -> str | None:
        """The user's own attention mode in the chat, or None when the chat's applies."""
        ...


class UserModesReader(Protocol):
    """Every user's own attention mode (SPEC 18), read from memory."""

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user."""
        ...


# What is kept for recall (SPEC 8): the store's own role, not a copy of its signatures.
RecallStore = MemoryKeeping


class CommandTreeStore(Protocol):
    """The digest of the slash command tree registered in each scope (SPEC 15)."""

    async def app_commands_hash(self, scope: str) -> str | None:
        """The digest of the tree last registered in `scope`."""
        ...

    def set_app_commands_hash(self, scope: str, digest: str, now: float) -> None:
        """Queue remembering that the tree with `digest` is registered in `scope`."""
        ...


class PersonaStore(RecallStore, Protocol):
    """What persona answers keep and search."""

    def reindex_memory_message(
        self,
        message_id: int,
        channel_id: int,
        guild_id: int | None,
        content: str,
        observed: Sequence[tuple[str, str]],
        at: float,
    ) -> None:
        """Queue applying an edit; each (persona, trigger) of `observed` is recorded again."""
        ...

    async def search_memory(
        self,
        query: str,
        since: float,
        workspace: str | None,
        limit: int = 10,
        *,
        channel_ids: Iterable[int] | None = None,
    ) -> list[MemoryHit]:
        """Memory matching any word of `query`, best first."""
        ...


class ChannelStore(
    TrustReader, ChatConfigReader, UserModesReader, PersonaStore, CommandTreeStore, Protocol
):
    """What the channel actor reads and keeps."""


class HandledIds(Protocol):
    """Which message ids were handled (SPEC 12): the ids in memory, then the database's."""

    def seen(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool | None:
        """True or False when memory knows; None when only the database does (the guild,
        None for a DM, names the shard whose floor applies)."""
        ...

    async def was_handled(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool:
        """Ask the database (for an id older than memory holds)."""
        ...


class RouterStore(
    TrustReader, ChatConfigReader, PersonaStore, HandledIds, CommandTreeStore, Protocol
):
    """What the router reads and keeps: trust, chat modes, recall, handled ids."""

    def note_seen(self, message_id: int) -> None:
        """Queue marking a message decided inline as seen."""
        ...

    def forget_channel(self, channel_id: int, chat_home: Path | None = None) -> None:
        """Queue forgetting a deleted channel's memory, catch-up activity and chat home."""
        ...


class CatchUpStore(TierReader, HandledIds, Protocol):
    """What catch-up reads: active channels, handled ids, the trust list."""

    async def active_channels(
        self, since: float, limit: int, shards: Sequence[tuple[int, int]] | None = None
    ) -> list[tuple[int, int | None, int]]:
        """(channel_id, guild_id, last_handled_id) of channels active since `since`, newest
        first, of `shards` (default: those this process serves)."""
        ...


class ThreadParents(Protocol):
    """Which channel a thread belongs to (its `parent_id`)."""

    def parent_of(self, channel_id: Snowflake) -> Snowflake | None:
        """The parent channel of a thread, else None."""
        ...


class ChannelDirectory(ThreadParents, Protocol):
    """Channels and threads seen on the gateway."""

    def get(self, channel_id: Snowflake) -> Channel | None:
        """The channel, if seen."""
        ...

    def add(self, channel: Channel) -> None:
        """Remember (or update) a channel."""
        ...

    def is_thread(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known thread."""
        ...

    def is_group_dm(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known group DM."""
        ...

    def guild_name(self, guild_id: Snowflake) -> str | None:
        """The guild's name, if seen."""
        ...


class ChannelBook(ChannelDirectory, Protocol):
    """The channel registry as the router keeps it (deletes included)."""

    def remove(self, channel_id: Snowflake) -> list[Snowflake]:
        """Forget a deleted channel and its threads; every id forgotten."""
        ...

    def name_guild(self, guild_id: Snowflake, name: str) -> None:
        """Remember a guild's name."""
        ...

    def note_roles(self, user_id: Snowflake, roles: tuple[Snowflake, ...]) -> None:
        """Remember the roles a member's server message carried."""
        ...


class ContextFeed(Protocol):
    """The context cache, as the router feeds it with gateway events."""

    def on_session_start(self) -> None:
        """A new gateway session: what happened meanwhile is unknown."""
        ...

    def on_message(self, message: Message) -> None:
        """A message was created."""
        ...

    def on_update(self, update: MessageUpdate) -> None:
        """A message was edited."""
        ...

    def on_delete(self, delete: MessageDelete | MessageDeleteBulk) -> None:
        """Messages were deleted."""
        ...

    def on_channel_delete(self, delete: ChannelDelete) -> None:
        """A channel was deleted."""
        ...

    def recent(self, channel_id: Snowflake, n: int) -> list[Message]:
        """The newest `n` cached messages of a channel, oldest first."""
        ...


class FetchCooldown(Protocol):
    """The context cache's per-channel `fetch_cooldown_seconds` (catch-up waits on it)."""

    async def fetch_turn(self, channel_id: Snowflake) -> None:
        """Wait until the channel's history may be fetched again."""
        ...


class ContextReader(Protocol):
    """The context cache, as the channel actor reads it."""

    def recent(self, channel_id: Snowflake, n: int) -> list[Message]:
        """The newest `n` cached messages, oldest first; no fetch."""
        ...

    def will_fetch(self, channel_id: Snowflake) -> bool:
        """Whether a trigger in this channel now would read its history from Discord."""
        ...

    async def context_for(
        self,
        trigger: Message,
        *,
        max_messages: int,
        max_chars: int,
        trusted: Callable[[Snowflake], bool] | None = None,
        from_discord: bool = True,
    ) -> tuple[str, ...]:
        """The context lines for a trigger, oldest first; a trigger Discord never sent as a
        message (`from_discord=False`) is not cached."""
        ...


class ModelClient(Protocol):
    """One model call (the LLM actor)."""

    async def complete(
        self,
        request: LLMRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_sent: Callable[[], None] | None = None,
        on_end: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> LLMResult:
        """Make the call; `on_text` gets the text as it streams and `on_end` the whole
        answer at the stream's end (an awaitable it returns is awaited before the call
        closes), `on_sent` is called once the request is written (or the call ended
        without it)."""
        ...


class HandledMarks(Protocol):
    """Marks that a decision on messages is final (never handled again)."""

    def finish(
        self, message_ids: Sequence[Snowflake], channel_id: Snowflake, guild_id: Snowflake | None
    ) -> None:
        """The decision on these messages is final."""
        ...


class HandledLookup(Protocol):
    """Whether a message is handled or in hand already."""

    def known(self, message_id: Snowflake) -> bool:
        """True when handled or in hand."""
        ...


class HandledBook(HandledMarks, HandledLookup, Protocol):
    """The handled ledger as the router keeps it (`picortex.actors.handled.HandledLedger`)."""

    def take(self, message_id: Snowflake, seq: int | None) -> bool:
        """Put a message in hand; False when it is handled or in hand already."""
        ...

    def routed(self, seq: int | None) -> None:
        """The dispatch with gateway sequence `seq` has been routed."""
        ...

    def release(self, message_ids: Sequence[Snowflake]) -> None:
        """Messages in hand that will not be handled now (a full mailbox)."""
        ...

    def new_session(self, seq: int | None = None) -> int | None:
        """A fresh IDENTIFY (its READY's `seq` names the shard): sequence numbers start again.
        Returns the shard's id (None: not known)."""
        ...


class ReplyTarget(Protocol):
    """Where replies go under the response policy (SPEC 10)."""

    def reply_target(self, command: str | None) -> policy.Target:
        """Where a reply goes (None: a free-chat answer)."""
        ...


class Poster(Protocol):
    """Posting one text as a plan says."""

    async def post(
        self,
        plan: policy.PostPlan,
        text: str,
        *,
        command: str | None,
        trigger_id: Snowflake | None,
        part: str | None = None,
    ) -> list[Snowflake]:
        """Post `text` (split to Discord's limit); the ids of the posted messages."""
        ...


class ReplyPoster(ReplyTarget, Poster, Protocol):
    """Posting replies under the response policy (SPEC 10) and streaming answers (SPEC 16)."""

    def reply_plan(self, message: Message, command: str | None) -> policy.PostPlan:
        """How to post the reply to `message`."""
        ...

    async def resolve_plan(self, plan: policy.PostPlan) -> policy.PostPlan:
        """The plan with its DM channel opened, when it goes to a DM."""
        ...

    def typing(
        self,
        channel_id: Snowflake,
        enabled: bool = True,
        *,
        spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None,
        hold: trio.Event | None = None,
    ) -> AbstractAsyncContextManager[trio.Event]:
        """Show the typing indicator while the block runs (from when `hold` is set)."""
        ...

    @property
    def gate(self) -> AnswerGate:
        """How many answers are made at once (the others wait in line)."""
        ...

    def expect_requests(self, count: int) -> None:
        """An answer's `count` requests (history, typing, reply) go in a moment: ask for
        their slots of the global limit now."""
        ...

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
        """Make the model call streamed and show the answer as it is written."""
        ...


class FailureRecorder(Protocol):
    """Failed invocations (SPEC 9): an event and an error row."""

    def record(
        self,
        *,
        stage: str,
        workspace: str,
        persona: str | None,
        signal_id: Snowflake | None,
        error: str,
        stack_trace: str | None,
    ) -> None:
        """Record one failed invocation."""
        ...

    async def pauses(self, settings: CompostSettings) -> list[Pause]:
        """The personas and stages paused by their failures now (SPEC 18)."""
        ...


class FatalReporter(Protocol):
    """Where a fatal Discord error (a refused token) is reported; the app then stops."""

    @property
    def fatal(self) -> Callable[[FatalDiscordError], None]:
        """The report."""
        ...


class Spawner(Protocol):
    """Background tasks that outlive a channel actor (polls)."""

    @property
    def spawn(self) -> Callable[..., None]:
        """Start a task in the app's background nursery."""
        ...


class InteractionRest(Protocol):
    """The REST calls slash commands make (picortex.discord.rest.RestClient)."""

    async def bulk_overwrite_global_commands(
        self, application_id: int, commands: list[dict[str, Any]]
    ) -> list[dict[str, Any]]: ...

    async def bulk_overwrite_guild_commands(
        self, application_id: int, guild_id: int, commands: list[dict[str, Any]]
    ) -> list[dict[str, Any]]: ...

    async def create_interaction_response(
        self, interaction_id: int, token: str, response: dict[str, Any]
    ) -> None: ...

    async def edit_original_interaction_response(
        self, application_id: int, token: str, message: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def get_original_interaction_response(
        self, application_id: int, token: str
    ) -> dict[str, Any]: ...

    async def create_followup_message(
        self, application_id: int, token: str, message: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def edit_followup_message(
        self, application_id: int, token: str, message_id: int, message: dict[str, Any]
    ) -> dict[str, Any]: ...


class ThreadStarter(Protocol):
    """Starting a thread from a message (persona answers)."""

    async def start_thread_from_message(
        self, channel_id: int, message_id: int, name: str
    ) -> dict[str, Any]:
        """POST /channels/{channel_id}/messages/{message_id}/threads."""
        ...


class ReactionsRest(Protocol):
    """Reactions on a message (polls)."""

    async def add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        """React to a message as the bot."""
        ...

    async def get_reactions(
        self, channel_id: int, message_id: int, emoji: str, *, after: int | None = None
    ) -> list[dict[str, Any]]:
        """One page of the users who reacted with `emoji`."""
        ...


class AttachmentSource(Protocol):
    """Downloading an attachment from Discord's CDN."""

    async def download_attachment(self, url: str, *, max_bytes: int) -> bytes:
        """The file's bytes, at most `max_bytes`."""
        ...


class ChannelRest(InteractionRest, ThreadStarter, ReactionsRest, AttachmentSource, Protocol):
    """The REST calls made on a channel actor's behalf besides posting replies."""


class IdentityRest(Protocol):
    """Who the bot is, asked of Discord."""

    async def get_current_user(self) -> dict[str, Any]:
        """GET /users/@me."""
        ...


class HistoryRest(Protocol):
    """A channel's history, read from Discord."""

    async def get_channel_messages(
        self,
        channel_id: int,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
        background: bool = False,
    ) -> list[dict[str, Any]]:
        """GET /channels/{channel_id}/messages (`background`: after live answers)."""
        ...


class CatchUpRest(HistoryRest, Protocol):
    """History read in the global limit's background lane, and slots held for answers."""

    async def hold_slot_for_answer(self) -> None:
        """Wait behind live answers, then hold a slot for the answer of a handed-over trigger."""
        ...


class RouterRest(InteractionRest, IdentityRest, Protocol):
    """The REST calls the router makes or starts (identity, slash command registration, the
    deferral of a slash answer its channel is late with)."""


class CatchUpClients(Protocol):
    """What catch-up uses (SPEC 4): active channels, their history, trust, handled marks."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force (the window, the owner)."""
        ...

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

    @property
    def store(self) -> CatchUpStore:
        """Active channels, handled ids, the trust list."""
        ...

    @property
    def rest(self) -> CatchUpRest:
        """Channel history."""
        ...

    @property
    def cache(self) -> FetchCooldown:
        """The per-channel fetch cooldown."""
        ...

    @property
    def handled(self) -> HandledLookup:
        """Messages handled or in hand."""
        ...

    @property
    def bot(self) -> BotIdentity:
        """Who the bot is (its own messages are not caught up)."""
        ...
