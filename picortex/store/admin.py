"""The store for commands run outside the bot (`picortex config`, `errors`, the MCP tools).

The same named queries as the running bot's store (`AdminQueries`), each run at once on the
caller's thread: a write is committed when it returns, so a command that printed "set" has
set it, and a busy or broken database is a `StoreError` the command turns into a sentence.
A running bot sees the change through SQLite's `data_version`, as with any other process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Self

from picortex.store.store import ChatConfig, InvocationError, Store, UserAttention

if TYPE_CHECKING:
    from picortex.store.database import Database


class AdminStore:
    """`AdminQueries` over one connection, every write committed before it returns."""

    def __init__(self, store: Database) -> None:
        self._db = store
        self._config_writes = 0  # data_version sees other connections' commits, not ours

    @classmethod
    def open(cls, path: Path) -> AdminStore:
        """Open (creating and migrating if needed) the database at `path`.

        Raises:
            StoreError: one sentence when the file cannot be opened or migrated.
        """
        return cls(Store.open(path))

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def flush(self) -> None:
        """Nothing to wait for: every write was committed when it returned."""

    # ---- trust list ----------------------------------------------------------------------

    def get_tier(self, user_id: int) -> str | None:
        """The user's trust tier, or None when not on the list."""
        return self._db.get_tier(user_id)

    def trust_list(self) -> list[tuple[int, str]]:
        """Every (user_id, tier) on the trust list, by user id. Scope: global."""
        return self._db.trust_list()

    def set_tier(self, user_id: int, tier: str) -> None:
        """Add the user to the trust list, or change their tier."""
        self._db.set_tier(user_id, tier)

    def remove_trust(self, user_id: int) -> bool:
        """Remove the user from the trust list; False when they were not on it."""
        return self._db.remove_trust(user_id)

    # ---- runtime config --------------------------------------------------------------------

    @property
    def config_version(self) -> object:
        """Changes with this store's config writes and with another connection's commits."""
        return (self._config_writes, self._db.data_version())

    def runtime_config(self) -> dict[str, str]:
        """Every runtime config override. Scope: global."""
        return self._db.runtime_config()

    def set_runtime_config(self, key: str, value: str) -> None:
        """Store one runtime override (already validated by the caller)."""
        self._db.set_runtime_config(key, value)
        self._config_writes += 1

    def delete_runtime_config(self, key: str) -> bool:
        """Drop one runtime override, so the file's value applies again."""
        self._config_writes += 1
        return self._db.delete_runtime_config(key)

    # ---- chat config -------------------------------------------------------------------------

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        return self._db.get_chat_config(chat_id)

    def chat_configs(self) -> list[ChatConfig]:
        """Every chat with its own settings, by chat id. Scope: global."""
        return self._db.chat_configs()

    def set_attention_mode(self, chat_id: int, mode: str, now: float) -> None:
        """Set the chat's attention mode, keeping its other settings."""
        self._db.set_attention_mode(chat_id, mode, now)

    def set_discriminator(
        self, chat_id: int, model: str | None, threshold: float | None, now: float
    ) -> None:
        """Set the chat's own discriminator model and confidence threshold (None: the
        default), keeping its mode."""
        self._db.set_discriminator(chat_id, model, threshold, now)

    def delete_chat_config(self, chat_id: int) -> bool:
        """Forget the chat's own settings, so the defaults apply again."""
        return self._db.delete_chat_config(chat_id)

    def get_user_attention(self, chat_id: int, user_id: int) -> str | None:
        """The user's own attention mode in the chat, or None."""
        for row in self._db.user_attentions():
            if (row.chat_id, row.user_id) == (chat_id, user_id):
                return row.mode
        return None

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user."""
        return self._db.user_attentions()

    def set_user_attention(self, chat_id: int, user_id: int, mode: str, now: float) -> None:
        """Set the user's own attention mode in the chat."""
        self._db.set_user_attention(chat_id, user_id, mode, now)

    def delete_user_attention(self, chat_id: int, user_id: int) -> bool:
        """Drop the user's own mode in the chat; False when they had none."""
        return self._db.delete_user_attention(chat_id, user_id)

    # ---- invocation errors -------------------------------------------------------------------

    def invocation_errors(self, unresolved_only: bool = False) -> list[InvocationError]:
        """Invocation errors, oldest first. Scope: global."""
        return self._db.invocation_errors(unresolved_only)

    def invocation_error(self, error_id: int) -> InvocationError | None:
        """One invocation error by id, or None."""
        return self._db.invocation_error(error_id)

    def unresolved_errors_since(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of recent unresolved errors. Scope: global."""
        return self._db.unresolved_errors_since(since)

    def resolve_invocation_error(self, error_id: int, resolution: str, resolved_at: float) -> bool:
        """Mark an error resolved; False when no error has that id."""
        return self._db.resolve_invocation_error(error_id, resolution, resolved_at)

    # ---- memory ------------------------------------------------------------------------------

    def forget_user_now(self, user_id: int) -> tuple[int, int]:
        """`forget_user` for a caller on a worker thread (the MCP tools)."""
        return self._db.forget_user(user_id)

    async def forget_user(self, user_id: int) -> tuple[int, int]:
        """Delete every stored message and observation by `user_id` in one transaction;
        returns (messages, observations) deleted."""
        return self.forget_user_now(user_id)

    # ---- budget ledger -----------------------------------------------------------------------

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
        self._db.add_spend(workspace, period_key, cost_usd, at, user_id=user_id)

    def spend(self, workspace: str, period_key: str) -> float:
        """USD spent by the workspace in the period."""
        return self._db.spend(workspace, period_key)

    def spend_by_workspace(self, period_key: str) -> dict[str, float]:
        """USD spent in the period, per workspace. Scope: global."""
        return self._db.spend_by_workspace(period_key)

    def user_spend(self, user_id: int, since: float) -> float:
        """USD spent on calls made for the user since `since`."""
        return self._db.user_spend(user_id, since)

    def spend_by_user(self, since: float) -> dict[int, float]:
        """USD spent since `since`, per user. Scope: global."""
        return self._db.spend_by_user(since)

    def daily_spend(self, since: float) -> list[tuple[str, str, float]]:
        """USD spent per workspace per UTC day since `since`. Scope: global."""
        return self._db.daily_spend(since)
