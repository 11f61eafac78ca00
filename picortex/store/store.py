"""The SQLite store (`picortex.db`): one apsw connection, WAL, every write in a transaction.

Trust list, runtime config, per-chat config, invocation errors, the budget ledger, memory
(messages and observations with FTS5 search) and seen events. All methods are synchronous
and thread-safe; times are Unix seconds (UTC).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final, Self, cast

import apsw
import attrs
import orjson

from picortex.config import ATTENTION_MODES
from picortex.errors import StoreError
from picortex.files import open_private, private_file
from picortex.store.schema import LATEST_VERSION, MIGRATIONS, SCHEMA_VERSION_TABLE
from picortex.store.shards import Shard, shard_scope

TRUST_TIERS: Final = ("user", "trusted", "admin")
STAGES: Final = ("discriminate", "tiebreak", "generate", "post")
RESOLUTIONS: Final = ("fixed", "dismissed", "composted")
DM_WORKSPACE: Final = "dm"  # the workspace of every DM; guild channels use the guild id
BUSY_TIMEOUT_MS: Final = 5_000  # a CLI command and the bot may write at once; wait, don't fail
# WAL with synchronous=NORMAL: a commit is in the WAL file before COMMIT returns, so a killed
# process loses nothing committed; only a power cut may lose the newest commits (never corrupt).
SYNCHRONOUS: Final = "NORMAL"
MAX_QUERY_TERMS: Final = 32  # recall needs the gist of a message, not every word of a long one
# A stored stack trace keeps its start (where the call came from) and its end (the frames
# that failed and the exception); a recursion or a huge repr in between is cut.
STACK_TRACE_HEAD_CHARS: Final = 1_000
STACK_TRACE_TAIL_CHARS: Final = 7_000
_DAY_SECONDS: Final = 86_400

_TERM: Final = re.compile(r"\w+")
_PRAGMA_NAME: Final = re.compile(r"[a-z_]+")


@attrs.frozen
class ChatConfig:
    """One row of `chat_config`: a chat's own attention settings (None: the default)."""

    chat_id: int
    attention_mode: str | None
    discriminator_model: str | None
    discriminator_threshold: float | None
    updated_at: float


@attrs.frozen
class UserAttention:
    """One row of `chat_user_attention`: a user's own attention mode in one chat."""

    chat_id: int
    user_id: int
    mode: str
    updated_at: float


@attrs.frozen
class InvocationError:
    """One row of `invocation_errors`: a failed model call or post, kept as data."""

    id: int
    workspace_id: str
    persona: str
    signal_id: str
    stage: str
    error_message: str
    stack_trace: str | None
    created_at: float
    resolved_at: float | None
    resolution: str | None


@attrs.frozen
class MemoryHit:
    """A stored message or observation that matched a memory search."""

    kind: str  # "message" or "observation"
    message_id: int
    channel_id: int
    guild_id: int | None
    content: str
    created_at: float
    author_name: str | None = None  # messages only
    persona: str | None = None  # observations only
    trigger: str | None = None  # observations only
    score: float = 0.0  # bm25: lower is a better match
    author_id: int | None = None  # who said it; None for an observation of unknown author


def query_terms(text: str) -> list[str]:
    """The distinct words of `text` a memory search looks for (any of them), in order."""
    # No case folding here: the full-text index folds query and text alike.
    return list(dict.fromkeys(_TERM.findall(text)))[:MAX_QUERY_TERMS]


def fts_query(text: str) -> str | None:
    """An FTS5 query matching any word of `text`, or None when it has no words.

    Each word is quoted as an FTS5 string, so no user text is read as query syntax.
    """
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _open_reason(exc: apsw.Error) -> str:
    if isinstance(exc, apsw.NotADBError):
        return "is not a SQLite database"
    if isinstance(exc, apsw.CantOpenError):
        return "cannot be opened (check that the path is a file you may write)"
    if isinstance(exc, apsw.ReadOnlyError | apsw.PermissionsError):
        return "is read-only"
    if isinstance(exc, apsw.BusyError):
        return "is locked by another process"
    return f"cannot be opened ({exc})"


class Store:
    """The picortex database. Open with `Store.open(path)`; close with `close()`."""

    def __init__(self, conn: apsw.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        # apsw serialises single calls, but a transaction spans several; keep them whole.
        self._lock = threading.RLock()
        self._depth = 0
        self.closed = False

    # ---- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (creating if needed) and migrate the database at `path`.

        Raises:
            StoreError: one sentence when the file cannot be opened or migrated.
        """
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path}: its folder cannot be created ({exc.strerror})") from None
        _make_private(path)
        conn: apsw.Connection | None = None
        try:
            conn = apsw.Connection(str(path))
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            mode = conn.execute("PRAGMA journal_mode = WAL").get
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: cannot use write-ahead logging (got {mode})")
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            conn.execute("PRAGMA foreign_keys = ON")
            # SQLite gives -wal and -shm the database file's mode; older files are fixed here.
            for suffix in ("-wal", "-shm"):
                private_file(Path(f"{path}{suffix}"))
        except apsw.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreError(f"{path} {_open_reason(exc)}") from None
        store = cls(conn, path)
        try:
            store._migrate()
        except BaseException:
            conn.close()
            raise
        return store

    def reopen(self) -> Store:
        """A second connection to the same file."""
        return Store.open(self.path)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self.closed = True
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _migrate(self) -> None:
        while True:
            with self.transaction():
                self._conn.execute(SCHEMA_VERSION_TABLE)
                current = self.schema_version()
                if current > LATEST_VERSION:
                    raise StoreError(
                        f"{self.path} was written by a newer picortex "
                        f"(schema {current}, this one knows up to {LATEST_VERSION})"
                    )
                if current == LATEST_VERSION:
                    return
                try:
                    self._conn.execute(MIGRATIONS[current])
                except apsw.Error as exc:
                    raise StoreError(
                        f"{self.path}: migration {current + 1} failed ({exc})"
                    ) from None
                self._conn.execute(
                    "INSERT INTO schema_version (version) VALUES (?)", (current + 1,)
                )

    def schema_version(self) -> int:
        """The number of migrations applied."""
        value = self._one("SELECT coalesce(max(version), 0) FROM schema_version")
        return cast(int, value)

    clustered = False  # one process, one file: no cluster to tell a heartbeat to
    unreachable_since: float | None = None  # a local file is never out of reach

    # Nothing tells of another connection's commits: `data_version` is looked at this often
    # (None: the store actor's own pace).
    coherence_seconds: float | None = None

    def listen(self, on_change: Callable[[], None] | None = None) -> None:
        """Nothing to do: SQLite's `data_version` is polled, cheaply, on the store thread."""

    def data_version(self) -> object:
        """Changes when another connection committed (SQLite's `data_version`)."""
        return self.pragma("data_version")

    def pragma(self, name: str) -> object:
        """The value of one PRAGMA on this connection (e.g. `journal_mode`, `foreign_keys`)."""
        if not _PRAGMA_NAME.fullmatch(name):
            raise ValueError(f"not a pragma name: {name!r}")
        return self._one(f"PRAGMA {name}")

    # ---- transactions --------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction; nested uses become savepoints.

        Raises:
            StoreError: when SQLite refuses the write (disk full, locked too long, ...).
        """
        with self._lock:
            depth = self._depth
            begin, commit, rollback = (
                ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
                if depth == 0
                else (f"SAVEPOINT s{depth}", f"RELEASE s{depth}", f"ROLLBACK TO s{depth}")
            )
            self._run(begin)
            self._depth = depth + 1
            try:
                yield
            except BaseException:
                self._depth = depth
                with contextlib.suppress(apsw.Error):
                    self._conn.execute(rollback)
                    if depth:
                        self._conn.execute(commit)  # a savepoint stays open after ROLLBACK TO
                raise
            self._depth = depth
            try:
                self._run(commit)
            except BaseException:
                if depth == 0:
                    with contextlib.suppress(apsw.Error):
                        self._conn.execute("ROLLBACK")
                raise

    # The store actor's group of writes: a local file's transaction either commits or says
    # it did not, so there is nothing to find again.
    commit_group = transaction

    def _run(self, sql: str, bindings: tuple[object, ...] = ()) -> apsw.Cursor:
        try:
            return self._conn.execute(sql, cast("apsw.Bindings", bindings))
        except apsw.Error as exc:
            raise StoreError(f"{self.path}: database error ({exc})") from exc

    def _all(self, sql: str, bindings: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            try:
                return list(self._run(sql, bindings))
            except apsw.Error as exc:
                raise StoreError(f"{self.path}: database error ({exc})") from exc

    def _one(self, sql: str, bindings: tuple[object, ...] = ()) -> object:
        rows = self._all(sql, bindings)
        return rows[0][0] if rows else None

    def _write(self, sql: str, bindings: tuple[object, ...] = ()) -> int:
        """Run one statement in its own transaction; returns the rows it changed."""
        with self.transaction():
            self._run(sql, bindings)
            return self._conn.changes()

    # ---- trust list ----------------------------------------------------------------------

    def get_tier(self, user_id: int) -> str | None:
        """The user's trust tier, or None when not on the list."""
        return cast("str | None", self._one("SELECT tier FROM trust WHERE user_id = ?", (user_id,)))

    def set_tier(self, user_id: int, tier: str) -> None:
        """Add the user to the trust list, or change their tier."""
        if tier not in TRUST_TIERS:
            raise ValueError(f"tier must be one of {', '.join(TRUST_TIERS)}, got {tier!r}")
        self._write(
            "INSERT INTO trust (user_id, tier) VALUES (?, ?) ON CONFLICT (user_id) DO UPDATE"
            " SET tier = excluded.tier, updated_at = unixepoch('subsec')",
            (user_id, tier),
        )

    def remove_trust(self, user_id: int) -> bool:
        """Remove the user from the trust list; False when they were not on it."""
        return self._write("DELETE FROM trust WHERE user_id = ?", (user_id,)) > 0

    def trust_list(self) -> list[tuple[int, str]]:
        """Every (user_id, tier) on the trust list, by user id."""
        rows = self._all("SELECT user_id, tier FROM trust ORDER BY user_id")
        return [(cast(int, uid), cast(str, tier)) for uid, tier in rows]

    # ---- runtime config ------------------------------------------------------------------

    def runtime_config(self) -> dict[str, str]:
        """Every runtime config override: dotted key -> text value."""
        rows = self._all("SELECT key, value FROM runtime_config ORDER BY key")
        return {cast(str, key): cast(str, value) for key, value in rows}

    def set_runtime_config(self, key: str, value: str) -> None:
        """Store one runtime override (already validated by the caller)."""
        self._write(
            "INSERT INTO runtime_config (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
            " SET value = excluded.value, updated_at = unixepoch('subsec')",
            (key, value),
        )

    def delete_runtime_config(self, key: str) -> bool:
        """Drop one runtime override, so the file's value applies again."""
        return self._write("DELETE FROM runtime_config WHERE key = ?", (key,)) > 0

    # ---- chat config ---------------------------------------------------------------------

    def app_commands_hash(self, scope: str) -> str | None:
        """The digest of the command tree last registered in `scope` (SPEC 15)."""
        value = self._one("SELECT hash FROM app_commands WHERE scope = ?", (scope,))
        return value if isinstance(value, str) else None

    def set_app_commands_hash(self, scope: str, digest: str, now: float) -> None:
        """Remember that the tree with `digest` is registered in `scope`."""
        self._write(
            "INSERT INTO app_commands (scope, hash, registered_at) VALUES (?, ?, ?) "
            "ON CONFLICT (scope) DO UPDATE SET hash = excluded.hash, "
            "registered_at = excluded.registered_at",
            (scope, digest, now),
        )

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        rows = self._all(
            "SELECT chat_id, attention_mode, discriminator_model, discriminator_threshold,"
            " updated_at FROM chat_config WHERE chat_id = ?",
            (str(chat_id),),
        )
        return _chat_config(rows[0]) if rows else None

    def chat_configs(self) -> list[ChatConfig]:
        """Every chat with its own settings, by chat id."""
        rows = self._all(
            "SELECT chat_id, attention_mode, discriminator_model, discriminator_threshold,"
            # Ids are digits: shorter is smaller, so this is numeric order.
            " updated_at FROM chat_config ORDER BY length(chat_id), chat_id"
        )
        return [_chat_config(row) for row in rows]

    def set_attention_mode(self, chat_id: int, mode: str, now: float) -> None:
        """Set the chat's attention mode, keeping its other settings."""
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")
        self._write(
            "INSERT INTO chat_config (chat_id, attention_mode, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE"
            " SET attention_mode = excluded.attention_mode, updated_at = excluded.updated_at",
            (str(chat_id), mode, now),
        )

    def set_discriminator(
        self, chat_id: int, model: str | None, threshold: float | None, now: float
    ) -> None:
        """Set the chat's own discriminator model and confidence threshold (None: the
        default), keeping its mode."""
        check_threshold(threshold)
        self._write(
            "INSERT INTO chat_config (chat_id, discriminator_model, discriminator_threshold,"
            " updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (chat_id) DO UPDATE"
            " SET discriminator_model = excluded.discriminator_model,"
            " discriminator_threshold = excluded.discriminator_threshold,"
            " updated_at = excluded.updated_at",
            (str(chat_id), model, threshold, now),
        )

    def delete_chat_config(self, chat_id: int) -> bool:
        """Forget the chat's own settings, so the defaults apply again."""
        return self._write("DELETE FROM chat_config WHERE chat_id = ?", (str(chat_id),)) > 0

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user."""
        rows = self._all(
            "SELECT chat_id, user_id, mode, updated_at FROM chat_user_attention"
            " ORDER BY chat_id, user_id"
        )
        return [
            UserAttention(cast(int, c), cast(int, u), cast(str, m), cast(float, t))
            for c, u, m, t in rows
        ]

    def set_user_attention(self, chat_id: int, user_id: int, mode: str, now: float) -> None:
        """Set a user's own attention mode in a chat."""
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")
        self._write(
            "INSERT INTO chat_user_attention (chat_id, user_id, mode, updated_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (chat_id, user_id) DO UPDATE"
            " SET mode = excluded.mode, updated_at = excluded.updated_at",
            (chat_id, user_id, mode, now),
        )

    def delete_user_attention(self, chat_id: int, user_id: int) -> bool:
        """Drop a user's own mode in a chat, so the chat's mode applies to them again."""
        return (
            self._write(
                "DELETE FROM chat_user_attention WHERE chat_id = ? AND user_id = ?",
                (chat_id, user_id),
            )
            > 0
        )

    # ---- invocation errors ---------------------------------------------------------------

    def add_invocation_error(
        self,
        workspace_id: str,
        persona: str,
        signal_id: str | int,
        stage: str,
        error_message: str,
        stack_trace: str | None,
        created_at: float,
    ) -> int:
        """Record a failed invocation (secrets already redacted by the caller); returns its id."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
        stack_trace = trim_stack_trace(stack_trace)
        with self.transaction():
            self._run(
                "INSERT INTO invocation_errors (workspace_id, persona, signal_id, stage,"
                " error_message, stack_trace, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    workspace_id,
                    persona,
                    str(signal_id),
                    stage,
                    error_message,
                    stack_trace,
                    created_at,
                ),
            )
            return self._conn.last_insert_rowid()

    def invocation_errors(self, unresolved_only: bool = False) -> list[InvocationError]:
        """Invocation errors, oldest first; only unresolved ones when asked."""
        where = " WHERE resolved_at IS NULL" if unresolved_only else ""
        rows = self._all(_ERROR_COLUMNS + where + " ORDER BY id")
        return [_invocation_error(row) for row in rows]

    def unresolved_errors_since(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of each unresolved error made at `since` or later,
        oldest first: what composting counts."""
        rows = self._all(
            "SELECT persona, stage, created_at FROM invocation_errors"
            " WHERE resolved_at IS NULL AND created_at >= ? ORDER BY created_at, id",
            (since,),
        )
        return [(str(p), str(s), float(cast(float, at))) for p, s, at in rows]

    def invocation_error(self, error_id: int) -> InvocationError | None:
        """One invocation error by id, or None."""
        rows = self._all(_ERROR_COLUMNS + " WHERE id = ?", (error_id,))
        return _invocation_error(rows[0]) if rows else None

    def resolve_invocation_error(self, error_id: int, resolution: str, resolved_at: float) -> bool:
        """Mark an error resolved; False when no error has that id."""
        if resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}")
        changed = self._write(
            "UPDATE invocation_errors SET resolution = ?, resolved_at = ? WHERE id = ?",
            (resolution, resolved_at, error_id),
        )
        return changed > 0

    # ---- budget ledger -------------------------------------------------------------------

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
        if not cost_usd >= 0:
            raise ValueError(f"cost_usd must be 0 or more, got {cost_usd!r}")
        self._write(
            "INSERT INTO budget_ledger (workspace, period_key, cost_usd, at, user_id)"
            " VALUES (?, ?, ?, ?, ?)",
            (workspace, period_key, cost_usd, at, user_id),
        )

    def user_spend(self, user_id: int, since: float) -> float:
        """USD spent on calls made for the user since `since` (Unix seconds)."""
        value = self._one(
            "SELECT coalesce(sum(cost_usd), 0.0) FROM budget_ledger WHERE user_id = ? AND at >= ?",
            (user_id, since),
        )
        return float(cast(float, value))

    def spend_by_user(self, since: float) -> dict[int, float]:
        """USD spent since `since`, per user (calls made for a user only)."""
        rows = self._all(
            "SELECT user_id, sum(cost_usd) FROM budget_ledger"
            " WHERE user_id IS NOT NULL AND at >= ? GROUP BY user_id ORDER BY user_id",
            (since,),
        )
        return {cast(int, uid): float(cast(float, total)) for uid, total in rows}

    def spend(self, workspace: str, period_key: str) -> float:
        """USD spent by the workspace in the period."""
        value = self._one(
            "SELECT coalesce(sum(cost_usd), 0.0) FROM budget_ledger"
            " WHERE period_key = ? AND workspace = ?",
            (period_key, workspace),
        )
        return float(cast(float, value))

    def spend_by_workspace(self, period_key: str) -> dict[str, float]:
        """USD spent in the period, per workspace."""
        rows = self._all(
            "SELECT workspace, sum(cost_usd) FROM budget_ledger WHERE period_key = ?"
            " GROUP BY workspace ORDER BY workspace",
            (period_key,),
        )
        return {cast(str, ws): float(cast(float, total)) for ws, total in rows}

    def roll_up_ledger(self, before: float) -> int:
        """Merge the ledger rows before `before` into one row per UTC day, workspace, period
        and user, dated at the day's start; returns how many rows fewer there are.

        Every total by period, workspace, user or day stays the same; `before` should be a
        day's start, so no day is split.
        """
        with self.transaction():
            last = self._one("SELECT max(id) FROM budget_ledger WHERE at < ?", (before,))
            if last is None:
                return 0
            bindings = (before, last, _DAY_SECONDS)
            added = self._write(
                "INSERT INTO budget_ledger (workspace, period_key, cost_usd, at, user_id)"
                " SELECT workspace, period_key, sum(cost_usd), CAST(at / ?3 AS INTEGER) * ?3,"
                " user_id FROM budget_ledger INDEXED BY budget_ledger_at WHERE at < ?1 AND id <= ?2"
                " GROUP BY workspace, period_key, user_id, CAST(at / ?3 AS INTEGER)"
                " HAVING count(*) > 1",
                bindings,
            )
            removed = self._write(_ROLLED_UP_SQL, bindings)
        return removed - added

    def daily_spend(self, since: float) -> list[tuple[str, str, float]]:
        """USD spent per workspace per UTC day (`YYYY-MM-DD`) since `since` (unix seconds)."""
        rows = self._all(
            "SELECT workspace, date(at, 'unixepoch'), sum(cost_usd) FROM budget_ledger"
            " WHERE at >= ? GROUP BY 1, 2 ORDER BY 2, 1",
            (since,),
        )
        return [(cast(str, ws), cast(str, day), float(cast(float, t))) for ws, day, t in rows]

    # ---- memory --------------------------------------------------------------------------

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
        """Store a message for recall; storing it again updates an edited text."""
        self._write(
            "INSERT INTO memory_messages (message_id, channel_id, guild_id, author_id,"
            " author_name, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (message_id) DO UPDATE SET content = excluded.content,"
            " author_name = excluded.author_name"
            " WHERE content IS NOT excluded.content OR author_name IS NOT excluded.author_name",
            (message_id, channel_id, guild_id, author_id, author_name, content, created_at),
        )

    def delete_memory_message(self, message_id: int) -> bool:
        """Forget a message (deleted on Discord); False when it was not stored."""
        return self.forget_messages([message_id]) > 0

    def forget_messages(self, message_ids: Iterable[int]) -> int:
        """Forget messages deleted on Discord and every observation made of them, at once.

        Returns how many stored messages were dropped (observations are not counted).
        """
        ids = orjson.dumps([int(i) for i in message_ids]).decode()
        with self.transaction():
            self._run(
                "DELETE FROM memory_observations"
                " WHERE message_id IN (SELECT value FROM json_each(?))",
                (ids,),
            )
            self._run(
                "DELETE FROM memory_messages WHERE message_id IN (SELECT value FROM json_each(?))",
                (ids,),
            )
            return self._conn.changes()

    def reindex_memory_message(self, message_id: int, content: str) -> int | None:
        """Apply an edit: the stored text becomes `content`; observations of the old text go.

        Returns the stored message's author id, or None when it was not stored (only a
        stored message is worth observing again).
        """
        with self.transaction():
            self._run(
                "UPDATE memory_messages SET content = ? WHERE message_id = ? AND content IS NOT ?",
                (content, message_id, content),
            )
            self._run("DELETE FROM memory_observations WHERE message_id = ?", (message_id,))
            author = self._one(
                "SELECT author_id FROM memory_messages WHERE message_id = ?", (message_id,)
            )
        return cast("int | None", author)

    def forget_channel(self, channel_id: int) -> int:
        """Forget every stored message and observation of a deleted channel or thread."""
        with self.transaction():
            self._run("DELETE FROM memory_messages WHERE channel_id = ?", (channel_id,))
            dropped = self._conn.changes()
            self._run("DELETE FROM memory_observations WHERE channel_id = ?", (channel_id,))
            return dropped + self._conn.changes()

    def add_observation(
        self,
        persona: str,
        message_id: int,
        channel_id: int,
        guild_id: int | None,
        trigger: str,
        content: str,
        created_at: float,
        author_id: int | None = None,
    ) -> bool:
        """Record that a persona's trigger matched a message by `author_id`; False if already
        recorded. An observation without an author is kept but never recalled."""
        changed = self._write(
            "INSERT INTO memory_observations (persona, message_id, channel_id, guild_id,"
            " trigger, content, created_at, author_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (persona, message_id, trigger) DO NOTHING",
            (persona, message_id, channel_id, guild_id, trigger, content, created_at, author_id),
        )
        return changed > 0

    def forget_user(self, user_id: int) -> tuple[int, int]:
        """Forget everything a person said (SPEC 8 `forget`): their stored messages and every
        observation of their words, at once. Returns (messages, observations) dropped."""
        with self.transaction():
            # Observations of their stored messages too, whatever author a row recorded.
            self._run(
                "DELETE FROM memory_observations WHERE author_id = ?1 OR message_id IN"
                " (SELECT message_id FROM memory_messages WHERE author_id = ?1)",
                (user_id,),
            )
            observations = self._conn.changes()
            self._run("DELETE FROM memory_messages WHERE author_id = ?", (user_id,))
            return self._conn.changes(), observations

    def search_memory(
        self,
        query: str,
        since: float,
        workspace: str | None,
        limit: int = 10,
        *,
        channel_id: int | None = None,
        channel_ids: Iterable[int] | None = None,
    ) -> list[MemoryHit]:
        """Messages and observations since `since` matching any word of `query`, best first.

        Args:
            query: any user text; punctuation and FTS5 syntax are treated as plain text.
            since: the oldest `created_at` to include (Unix seconds).
            workspace: a guild id as text, `"dm"` for direct messages, or None for all.
            limit: the most hits to return.
            channel_id: when given, only hits from that channel.
            channel_ids: when given, only hits from these channels (with `channel_id`, both).
        """
        match = fts_query(query)
        if match is None or limit <= 0:
            return []
        channels: str | None = None
        if channel_id is not None or channel_ids is not None:
            wanted = [*(channel_ids or ()), *(() if channel_id is None else (channel_id,))]
            channels = orjson.dumps([int(c) for c in wanted]).decode()
        guild: int | None = None
        if workspace is not None and workspace != DM_WORKSPACE:
            if not workspace.isdigit():
                return []
            guild = int(workspace)
        params = (match, since, workspace is None, workspace == DM_WORKSPACE, guild, channels)
        rows = self._all(_SEARCH_SQL, (*params, limit))
        return [
            MemoryHit(
                kind=cast(str, kind),
                message_id=cast(int, message_id),
                channel_id=cast(int, chan),
                guild_id=cast("int | None", guild_id),
                content=cast(str, content),
                created_at=cast(float, created_at),
                author_name=cast("str | None", author_name),
                persona=cast("str | None", persona),
                trigger=cast("str | None", trigger),
                score=cast(float, score),
                author_id=cast("int | None", author_id),
            )
            for (
                kind,
                message_id,
                chan,
                guild_id,
                author_name,
                persona,
                trigger,
                content,
                created_at,
                score,
                author_id,
            ) in rows
        ]

    # ---- seen events ---------------------------------------------------------------------

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None:
        """The channel had a message handled: catch-up after a new session looks at it."""
        self._write(
            "INSERT INTO channel_activity (channel_id, guild_id, last_handled_id, active_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (channel_id) DO UPDATE SET"
            " last_handled_id = max(last_handled_id, excluded.last_handled_id),"
            " guild_id = coalesce(excluded.guild_id, guild_id), active_at = excluded.active_at",
            (channel_id, guild_id, last_handled_id, at),
        )

    def active_channels(
        self, since: float, limit: int, shards: Iterable[Shard] | None = None
    ) -> list[tuple[int, int | None, int]]:
        """(channel_id, guild_id, last_handled_id) of channels active since `since`, newest
        first; of `shards` only (DMs are shard 0) when given."""
        rows = self._all(
            "SELECT channel_id, guild_id, last_handled_id FROM channel_activity"
            " WHERE active_at >= ?1 AND (?2 IS NULL"
            " OR coalesce((guild_id >> 22) % ?2, 0) IN (SELECT value FROM json_each(?3)))"
            " ORDER BY active_at DESC LIMIT ?4",
            (since, *_shard_bindings(shards), limit),
        )
        return [(cast(int, c), cast("int | None", g), cast(int, m)) for c, g, m in rows]

    def forget_channel_activity(self, channel_id: int) -> None:
        """A deleted channel is never caught up."""
        self._write("DELETE FROM channel_activity WHERE channel_id = ?", (channel_id,))

    # ---- gateway session -----------------------------------------------------------------

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        """The persisted (session_id, resume_gateway_url, seq) of a shard, if any."""
        rows = self._all(
            "SELECT session_id, resume_gateway_url, seq FROM gateway_session"
            " WHERE shard_id = ? AND shard_count = ?",
            shard,
        )
        if not rows:
            return None
        session_id, url, seq = rows[0]
        return cast(str, session_id), cast(str, url), cast(int, seq)

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None:
        """Persist the shard's session so a restarted process can RESUME it."""
        self._write(
            "INSERT INTO gateway_session (shard_id, shard_count, session_id, resume_gateway_url,"
            " seq, updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (shard_id) DO UPDATE SET"
            " shard_count = excluded.shard_count, session_id = excluded.session_id,"
            " resume_gateway_url = excluded.resume_gateway_url, seq = excluded.seq,"
            " updated_at = excluded.updated_at",
            (shard[0], shard[1], session_id, url, seq, at),
        )

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        """The session ended (a clean shutdown, or Discord invalidated it)."""
        self._write("DELETE FROM gateway_session WHERE shard_id = ?", (shard[0],))

    def mark_seen_many(self, rows: list[tuple[int, float, int | None]]) -> None:
        """Remember many handled message ids (id, seen_at, guild_id) in one statement."""
        with self.transaction():
            try:
                self._conn.executemany(
                    "INSERT INTO seen_events (message_id, seen_at, guild_id) VALUES (?, ?, ?)"
                    " ON CONFLICT (message_id) DO NOTHING",
                    rows,
                )
            except apsw.Error as exc:
                raise StoreError(f"{self.path}: database error ({exc})") from exc

    def newest_seen(self, limit: int, shards: Iterable[Shard] | None = None) -> list[int]:
        """The `limit` highest handled message ids, highest first; of `shards` only when
        given (marks without a guild count for every shard: DMs, and marks made before
        guilds were kept)."""
        rows = self._all(
            "SELECT message_id FROM seen_events WHERE ?2 IS NULL OR guild_id IS NULL"
            " OR (guild_id >> 22) % ?2 IN (SELECT value FROM json_each(?3))"
            " ORDER BY message_id DESC LIMIT ?1",
            (limit, *_shard_bindings(shards)),
        )
        return [cast(int, row[0]) for row in rows]

    def shard_seen_since(self, shard: Shard, first_id: int) -> list[int]:
        """The handled message ids from `first_id` up of one shard (and those without a
        guild), lowest first: what a process taking the shard over keeps in memory."""
        rows = self._all(
            "SELECT message_id FROM seen_events WHERE message_id >= ?1 AND (?2 IS NULL"
            " OR guild_id IS NULL OR (guild_id >> 22) % ?2 IN (SELECT value FROM json_each(?3)))"
            " ORDER BY message_id",
            (first_id, *_shard_bindings([shard])),
        )
        return [cast(int, row[0]) for row in rows]

    def is_seen(self, message_id: int) -> bool:
        """Whether the message id was handled before."""
        return self._one("SELECT 1 FROM seen_events WHERE message_id = ?", (message_id,)) == 1

    def prune_seen(self, older_than: float) -> int:
        """Forget ids seen before `older_than`; returns how many were dropped."""
        return self._write("DELETE FROM seen_events WHERE seen_at < ?", (older_than,))

    def prune_resolved_errors(self, resolved_before: float) -> int:
        """Forget invocation errors resolved before `resolved_before`; unresolved ones stay."""
        return self._write(
            "DELETE FROM invocation_errors WHERE resolved_at IS NOT NULL AND resolved_at < ?",
            (resolved_before,),
        )

    def cap_unresolved_errors(self, keep: int) -> int:
        """Forget the oldest unresolved invocation errors beyond the newest `keep`."""
        return self._write(
            "DELETE FROM invocation_errors WHERE resolved_at IS NULL AND id < ("
            " SELECT id FROM invocation_errors WHERE resolved_at IS NULL"
            " ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (max(keep, 1) - 1,),
        )

    def prune_memory(self, older_than: float) -> int:
        """Forget stored messages and observations older than `older_than` (Unix seconds)."""
        with self.transaction():
            dropped = self._write("DELETE FROM memory_messages WHERE created_at < ?", (older_than,))
            dropped += self._write(
                "DELETE FROM memory_observations WHERE created_at < ?", (older_than,)
            )
        return dropped


def _shard_bindings(shards: Iterable[Shard] | None) -> tuple[int | None, str]:
    """What a query of some shards' rows binds to ?2 and ?3: their count (NULL: every
    shard) and their ids as a JSON array. Rows are of the shard `(guild_id >> 22) % ?2`."""
    scope = shard_scope(shards)
    if scope is None:
        return None, "[]"
    return scope.count, orjson.dumps(scope.ids).decode()


# The rows `roll_up_ledger` merged (numbered up to ?2, before ?1; ?3 is a day in seconds).
# Found through the time index: the rows rolled up by earlier rounds are few, and the 90
# days of detail after them are never read.
_ROLLED_UP_SQL: Final = """
DELETE FROM budget_ledger WHERE id IN (
    SELECT id FROM (
        SELECT id, count(*) OVER (
            PARTITION BY workspace, period_key, user_id, CAST(at / ?3 AS INTEGER)
        ) AS day_rows
        FROM budget_ledger INDEXED BY budget_ledger_at WHERE at < ?1 AND id <= ?2
    ) WHERE day_rows > 1
)
"""


def trim_stack_trace(trace: str | None) -> str | None:
    """A stack trace cut to its first and last characters, saying how much was left out."""
    if trace is None or len(trace) <= STACK_TRACE_HEAD_CHARS + STACK_TRACE_TAIL_CHARS:
        return trace
    cut = len(trace) - STACK_TRACE_HEAD_CHARS - STACK_TRACE_TAIL_CHARS
    return (
        trace[:STACK_TRACE_HEAD_CHARS]
        + f"\n[... {cut} characters trimmed ...]\n"
        + trace[-STACK_TRACE_TAIL_CHARS:]
    )


_ERROR_COLUMNS: Final = (
    "SELECT id, workspace_id, persona, signal_id, stage, error_message, stack_trace,"
    " created_at, resolved_at, resolution FROM invocation_errors"
)

# One fixed statement; filters switch on through parameters, so no text is ever spliced in.
# Parameters: 1 match, 2 since, 3 all workspaces, 4 DMs only, 5 guild id, 6 channel ids (a
# JSON array, or NULL for all), 7 limit.
_SEARCH_SQL: Final = """
SELECT 'message', t.message_id, t.channel_id, t.guild_id, t.author_name, NULL, NULL,
       t.content, t.created_at, bm25(memory_messages_fts) AS score, t.author_id
FROM memory_messages_fts JOIN memory_messages AS t ON t.message_id = memory_messages_fts.rowid
WHERE memory_messages_fts MATCH ?1 AND t.created_at >= ?2
  AND (?3 OR (?4 AND t.guild_id IS NULL) OR t.guild_id = ?5)
  AND (?6 IS NULL OR t.channel_id IN (SELECT value FROM json_each(?6)))
UNION ALL
SELECT 'observation', t.message_id, t.channel_id, t.guild_id, NULL, t.persona, t.trigger,
       t.content, t.created_at, bm25(memory_observations_fts) AS score, t.author_id
FROM memory_observations_fts JOIN memory_observations AS t ON t.id = memory_observations_fts.rowid
WHERE memory_observations_fts MATCH ?1 AND t.created_at >= ?2
  AND (?3 OR (?4 AND t.guild_id IS NULL) OR t.guild_id = ?5)
  AND (?6 IS NULL OR t.channel_id IN (SELECT value FROM json_each(?6)))
ORDER BY score, 9 DESC
LIMIT ?7
"""


def _make_private(path: Path) -> None:
    """Create the database file 0600 before SQLite opens it (or make an old one 0600)."""
    # On failure SQLite's own open below reports what is wrong with the path, in a sentence.
    with contextlib.suppress(OSError):
        os.close(open_private(path, os.O_RDWR))


def check_threshold(threshold: float | None) -> None:
    """Refuse a discriminator confidence threshold outside 0..1 (None: the default)."""
    if threshold is not None and not 0 <= threshold <= 1:
        raise ValueError("discriminator_threshold must be from 0 to 1")


def _chat_config(row: tuple[object, ...]) -> ChatConfig:
    chat_id, mode, model, threshold, updated_at = row
    return ChatConfig(
        chat_id=int(cast(str, chat_id)),
        attention_mode=cast("str | None", mode),
        discriminator_model=cast("str | None", model),
        discriminator_threshold=cast("float | None", threshold),
        updated_at=cast(float, updated_at),
    )


def _invocation_error(row: tuple[object, ...]) -> InvocationError:
    (eid, workspace, persona, signal, stage, message, trace, created, resolved, resolution) = row
    return InvocationError(
        id=cast(int, eid),
        workspace_id=cast(str, workspace),
        persona=cast(str, persona),
        signal_id=cast(str, signal),
        stage=cast(str, stage),
        error_message=cast(str, message),
        stack_trace=cast("str | None", trace),
        created_at=cast(float, created),
        resolved_at=cast("float | None", resolved),
        resolution=cast("str | None", resolution),
    )
