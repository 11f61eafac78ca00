"""The store as named queries: the one surface the rest of picortex reads and writes through.

`AdminQueries` is what the panel, the MCP tools and the CLI need; both the store actor (the
running bot's store) and `AdminStore` (the CLI's, committed at once when no bot runs)
answer it. `StoreQueries` adds what the message path needs, answered by the store actor:
reads the decision path makes are served from memory, writes are queued and committed in
groups on the store's thread, and the few reads that must reach the database are awaited.
Nothing outside `picortex.store` sees a connection, so another backend can answer the
same protocol.

Each query that reads or changes a whole table names its scope:

- *scope: global* — one answer for the whole deployment; a cluster runs it once (pruning)
  or every node reads the same rows (trust, config, budget totals).
- *scope: per shard* — it reads the rows of the guilds of the shards a node serves
  (`(guild_id >> 22) % count`; DMs are shard 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from picortex.store.seen import ANY_GUILD

if TYPE_CHECKING:
    from pathlib import Path

    from picortex.store.store import ChatConfig, InvocationError, MemoryHit, UserAttention


class TrustQueries(Protocol):
    """The trust list (SPEC 3)."""

    def get_tier(self, user_id: int) -> str | None:
        """The user's trust tier, or None when not on the list."""
        ...

    def trust_list(self) -> list[tuple[int, str]]:
        """Every (user_id, tier) on the trust list, by user id. Scope: global."""
        ...

    def set_tier(self, user_id: int, tier: str) -> None:
        """Add the user to the trust list, or change their tier."""
        ...

    def remove_trust(self, user_id: int) -> bool:
        """Remove the user from the trust list; False when they were not on it."""
        ...


class RuntimeConfigQueries(Protocol):
    """Runtime config overrides (`picortex config set`)."""

    @property
    def config_version(self) -> object:
        """Changes whenever the runtime config may have changed (compare, don't read)."""
        ...

    def runtime_config(self) -> dict[str, str]:
        """Every runtime config override: dotted key -> text value. Scope: global."""
        ...

    def set_runtime_config(self, key: str, value: str) -> None:
        """Store one runtime override (already validated by the caller)."""
        ...

    def delete_runtime_config(self, key: str) -> bool:
        """Drop one runtime override, so the file's value applies again."""
        ...


class ChatConfigQueries(Protocol):
    """Per-chat settings (attention mode)."""

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        ...

    def chat_configs(self) -> list[ChatConfig]:
        """Every chat with its own settings, by chat id. Scope: global."""
        ...

    def set_attention_mode(self, chat_id: int, mode: str, now: float) -> None:
        """Set the chat's attention mode, keeping its other settings."""
        ...

    def set_discriminator(
        self, chat_id: int, model: str | None, threshold: float | None, now: float
    ) -> None:
        """Set the chat's own discriminator model and confidence threshold (None: the
        default), keeping its mode."""
        ...

    def delete_chat_config(self, chat_id: int) -> bool:
        """Forget the chat's own settings, so the defaults apply again."""
        ...

    def get_user_attention(self, chat_id: int, user_id: int) -> str | None:
        """The user's own attention mode in the chat (SPEC 18), or None: the chat's applies."""
        ...

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user. Scope: global."""
        ...

    def set_user_attention(self, chat_id: int, user_id: int, mode: str, now: float) -> None:
        """Set the user's own attention mode in the chat."""
        ...

    def delete_user_attention(self, chat_id: int, user_id: int) -> bool:
        """Drop the user's own mode in the chat; False when they had none."""
        ...


class ErrorQueries(Protocol):
    """Invocation errors as an operator reads and resolves them (SPEC 9)."""

    def invocation_errors(self, unresolved_only: bool = False) -> list[InvocationError]:
        """Invocation errors, oldest first. Scope: global."""
        ...

    def invocation_error(self, error_id: int) -> InvocationError | None:
        """One invocation error by id, or None."""
        ...

    def unresolved_errors_since(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of the unresolved errors made at `since` or later,
        oldest first (what composting counts). Scope: global."""
        ...

    def resolve_invocation_error(self, error_id: int, resolution: str, resolved_at: float) -> bool:
        """Mark an error resolved (committed when this returns); False when no such id."""
        ...


class SpendQueries(Protocol):
    """The budget ledger (SPEC 9)."""

    def add_spend(
        self,
        workspace: str,
        period_key: str,
        cost_usd: float,
        at: float,
        *,
        user_id: int | None = None,
    ) -> None:
        """Record the cost of one model call against a workspace and period (and its user)."""
        ...

    def spend(self, workspace: str, period_key: str) -> float:
        """USD spent by the workspace in the period."""
        ...

    def spend_by_workspace(self, period_key: str) -> dict[str, float]:
        """USD spent in the period, per workspace that spent anything. Scope: global."""
        ...

    def user_spend(self, user_id: int, since: float) -> float:
        """USD spent on calls made for the user since `since` (a day's start)."""
        ...

    def spend_by_user(self, since: float) -> dict[int, float]:
        """USD spent since `since` (a day's start), per user. Scope: global."""
        ...

    def daily_spend(self, since: float) -> list[tuple[str, str, float]]:
        """USD spent per workspace per UTC day since `since`. Scope: global."""
        ...


class AdminQueries(
    TrustQueries, RuntimeConfigQueries, ChatConfigQueries, ErrorQueries, SpendQueries, Protocol
):
    """What the panel, the MCP tools and the CLI read and change."""

    async def forget_user(self, user_id: int) -> tuple[int, int]:
        """Delete every stored message and observation by `user_id` in one transaction;
        returns (messages, observations) deleted. Scope: global."""
        ...

    async def flush(self) -> None:
        """Wait until every write made so far is committed.

        Raises:
            StoreError: when they could not be committed.
        """
        ...

    def close(self) -> None:
        """Commit what is queued and close (idempotent)."""
        ...


class HandledQueries(Protocol):
    """Which messages were handled (SPEC 12) and where the bot was active."""

    def seen(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool | None:
        """True when handled before, False when surely not, None when only the database
        knows (the guild, None for a DM, says whose shard's floor applies)."""
        ...

    async def was_handled(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool:
        """Whether the message id was handled before, asking the database for an old id."""
        ...

    def note_seen(self, message_id: int) -> None:
        """Remember an id in memory only (chatter)."""
        ...

    def mark_handled(
        self, message_id: int, at: float | None = None, guild_id: int | None = None
    ) -> None:
        """Queue remembering that a message of `guild_id` (None: a DM) was handled."""
        ...

    async def adopt_shard(self, shard: tuple[int, int]) -> None:
        """Take a shard over from another process: its recent handled ids are known from
        now on, with a floor of its own. Scope: per shard."""
        ...

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None:
        """Queue noting that the channel had a message handled (catch-up looks there)."""
        ...

    async def active_channels(
        self, since: float, limit: int, shards: Sequence[tuple[int, int]] | None = None
    ) -> list[tuple[int, int | None, int]]:
        """(channel_id, guild_id, last_handled_id) of channels active since `since`, newest
        first. Scope: per shard (`shards`, default: those this process serves)."""
        ...


class MemoryKeeping(Protocol):
    """What the message path keeps in and drops from memory (SPEC 8): one role, so an
    actor that only remembers is typed by it alone."""

    def add_memory_message(
        self,
        message_id: int,
        channel_id: int,
        guild_id: int | None,
        author_id: int,
        author_name: str,
        content: str,
        created_at: float,
    ) -> None:
        """Queue keeping a message; storing it again updates an edited text."""
        ...

    def add_observation(
        self,
        persona: str,
        message_id: int,
        channel_id: int,
        guild_id: int | None,
        trigger: str,
        content: str,
        created_at: float,
        *,
        author_id: int | None,
    ) -> None:
        """Queue recording that a persona's trigger matched a message by `author_id`."""
        ...

    def forget_messages(self, message_ids: Iterable[int]) -> None:
        """Queue forgetting deleted messages and every observation made of them."""
        ...


class MemoryQueries(MemoryKeeping, Protocol):
    """Memory recall (SPEC 8): messages and observations, kept, forgotten and searched."""

    def forget_channel(self, channel_id: int, chat_home: Path | None = None) -> None:
        """Queue forgetting a deleted channel's messages, observations and activity, and
        removing its chat home under `chat_home` (the chats folder) when given."""
        ...

    def reindex_memory_message(
        self,
        message_id: int,
        channel_id: int,
        guild_id: int | None,
        content: str,
        observed: Sequence[tuple[str, str]],
        at: float,
    ) -> None:
        """Queue applying an edit in one step: the stored text becomes `content`, observations
        of the old text go, and when the message is stored each (persona, trigger) of
        `observed` is recorded again, by the stored message's author."""
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
        """Messages and observations since `since` matching any word of `query`, best first
        (it sees every write queued before it)."""
        ...


class SessionQueries(Protocol):
    """The gateway session a restarted process resumes, and the registered command tree."""

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        """The persisted (session_id, resume_gateway_url, seq) of a shard, if any."""
        ...

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None:
        """Queue persisting the shard's session."""
        ...

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        """Queue forgetting the shard's session (it ended)."""
        ...

    async def app_commands_hash(self, scope: str) -> str | None:
        """The digest of the command tree last registered in `scope` (SPEC 15)."""
        ...

    def set_app_commands_hash(self, scope: str, digest: str, now: float) -> None:
        """Queue remembering that the tree with `digest` is registered in `scope`."""
        ...


class FailureQueries(Protocol):
    """Where failed invocations are recorded (SPEC 9)."""

    def add_invocation_error(
        self,
        workspace_id: str,
        persona: str,
        signal_id: str,
        stage: str,
        error_message: str,
        stack_trace: str | None,
        created_at: float,
        *,
        on_committed: Callable[[int], None] | None = None,
    ) -> None:
        """Queue an error row (secrets already redacted); `on_committed(row_id)` runs on the
        event loop once it is committed."""
        ...

    async def recent_unresolved_errors(self, since: float) -> list[tuple[str, str, float]]:
        """`unresolved_errors_since` on the store's thread, after every queued write: for the
        message path. Scope: global."""
        ...


class PruneQueries(Protocol):
    """Dropping what is no longer needed. Each runs on the store's thread in queue order;
    in a cluster one process at a time runs it, and another trying meanwhile skips it (0)."""

    async def prune_memory(self, older_than: float) -> int:
        """Forget messages and observations older than `older_than`. Scope: global."""
        ...

    async def prune_resolved_errors(self, resolved_before: float) -> int:
        """Forget errors resolved before `resolved_before`. Scope: global."""
        ...

    async def prune_seen(self, older_than: float) -> int:
        """Forget handled ids seen before `older_than`. Scope: global."""
        ...

    async def cap_unresolved_errors(self, keep: int) -> int:
        """Keep the newest `keep` unresolved errors, dropping the oldest. Scope: global."""
        ...

    async def roll_up_ledger(self, before: float) -> int:
        """Turn ledger rows older than `before` into one row per day (same totals); returns
        how many rows went. Scope: global."""
        ...


class StoreQueries(
    AdminQueries,
    HandledQueries,
    MemoryQueries,
    SessionQueries,
    FailureQueries,
    PruneQueries,
    Protocol,
):
    """Every named query of the running bot's store."""
