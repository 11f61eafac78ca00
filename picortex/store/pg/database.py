"""The PostgreSQL store: one psycopg connection and its SQL, method for method like `Store`.

The store actor and `AdminStore` run it exactly as they run SQLite's `Store`: the worker
thread commits groups of writes in one transaction (each write a savepoint of its own), so
only the SQL differs. All methods are synchronous and thread-safe; times are Unix seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Self, cast

import psycopg
from psycopg import conninfo

from picortex.config import ATTENTION_MODES
from picortex.core.redact import remember_secrets, url_secrets
from picortex.errors import StoreError
from picortex.store.pg.cluster import ClusterNode, SavedSession
from picortex.store.pg.link import Link, connect, reason
from picortex.store.pg.listener import ConfigListener
from picortex.store.pg.prune import one_pruner
from picortex.store.pg.schema import LATEST_VERSION, MIGRATIONS, SCHEMA_VERSION_TABLE
from picortex.store.shards import Shard, shard_scope
from picortex.store.store import (
    DM_WORKSPACE,
    RESOLUTIONS,
    STAGES,
    TRUST_TIERS,
    ChatConfig,
    InvocationError,
    MemoryHit,
    UserAttention,
    check_threshold,
    query_terms,
    trim_stack_trace,
)

# How often another process's change to trust or config is looked for: one indexed read
# of one row, well inside the second the SPEC allows for a change to reach every process.
COHERENCE_SECONDS: Final = 0.2
# ... while a listener hears each change as it commits: the poll is only the backstop for a
# listener that hangs without noticing.
BACKSTOP_SECONDS: Final = 1.5
BAD_URL: Final = (
    "PICORTEX_DATABASE_URL is not a valid PostgreSQL connection string "
    "(postgresql://user:password@host/dbname, spaces and symbols percent-encoded)"
)
# Taken while migrating, so that processes starting together migrate one after another.
_MIGRATION_LOCK: Final = 0x70C0_27E5

Row = tuple[object, ...]


def describe(url: str) -> str:
    """Where `url` points (host and database), never its password."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "PostgreSQL (PICORTEX_DATABASE_URL is not a valid connection URL)"
    host = str(params.get("host") or "localhost")
    if host.startswith("/"):
        host = "local socket"
    return f"PostgreSQL {params.get('dbname') or params.get('user') or ''} on {host}".rstrip()


class PgDatabase:
    """The picortex tables in PostgreSQL. Open with `PgDatabase.open(url)`."""

    def __init__(self, conn: psycopg.Connection[Row], url: str) -> None:
        self._url = url
        self.path = describe(url)  # what messages name (never the URL: it holds a password)
        # Made again when lost (the server restarted, a network cut): see `Link`.
        self._link = Link(url, self.path, conn, on_reconnect=self._reconnected)
        self._depth = 0  # open transactions (savepoints nest inside the first)
        self.closed = False
        # psycopg serialises single statements, but a transaction spans several; keep whole.
        self._lock = threading.RLock()
        # The config counter as last read or heard, and how many times the listener asked
        # for everything to be reloaded (a reconnect, a missed notification): together the
        # `data_version` that tells the store actor to reload.
        self._version_lock = threading.Lock()
        self._version: int | None = None
        self._reloads = 0
        self._version_at = -COHERENCE_SECONDS
        self._clock = time.monotonic
        self._listener: ConfigListener | None = None
        self._on_change: Callable[[], None] | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> PgDatabase:
        """Connect to `url` and (unless told not to) create or migrate the schema.

        Raises:
            StoreError: one sentence when the database cannot be reached or migrated.
        """
        remember_secrets(*url_secrets(url))
        where = describe(url)
        try:
            conn = connect(url)
        except psycopg.ProgrammingError:
            # libpq quotes the part it could not parse: it may be a piece of the password.
            raise StoreError(BAD_URL) from None
        except psycopg.Error as exc:
            raise StoreError(f"{where} cannot be reached ({reason(exc)})") from None
        db = cls(conn, url)
        if migrate:
            try:
                db.migrate()
            except BaseException:
                db.close()
                raise
        return db

    def reopen(self) -> PgDatabase:
        """A second connection to the same database (already migrated)."""
        return PgDatabase.open(self._url, migrate=False)

    clustered = True  # many processes share it (SPEC 17): each tells a heartbeat

    # The store actor looks at `data_version` this often by itself; the listener wakes it
    # for each change it hears (`listen`), so this is only how soon a change is seen while
    # no listener is up.
    coherence_seconds: float | None = COHERENCE_SECONDS

    def listen(self, on_change: Callable[[], None] | None = None) -> None:
        """Hear other processes' config changes as they commit (a thread of its own);
        `on_change` is told of each (on that thread), after `data_version` has moved."""
        self._on_change = on_change
        if self._listener is None:
            self._listener = ConfigListener(
                self._url, self.path, self._heard, told=lambda: self.unreachable_since is not None
            )
        self._listener.start()

    def _heard(self, version: int, reload_all: bool) -> None:
        """The listener's news (its thread): the counter moved, or reload everything."""
        with self._version_lock:
            if self._version is None or version > self._version:
                self._version = version
            if reload_all:
                self._reloads += 1
        told = self._on_change
        if told is not None:
            told()

    def _reconnected(self) -> None:
        """A lost connection was made again: whatever changed meanwhile is reloaded."""
        with self._version_lock:
            self._reloads += 1

    @property
    def _conn(self) -> psycopg.Connection[Row]:
        return self._link.conn

    @property
    def unreachable_since(self) -> float | None:
        """When the connection was lost (Unix seconds), while it is; None when up."""
        return self._link.unreachable_since

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._listener is not None:
            self._listener.stop()
        with self._lock:
            self.closed = True
            self._link.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def migrate(self) -> int:
        """Apply the migrations this database lacks, in order; returns the schema version.

        Raises:
            StoreError: when the database is newer than this picortex, or a migration failed.
        """
        with self.transaction():
            self._run("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            self._run(SCHEMA_VERSION_TABLE)
            current = self.schema_version()
            if current > LATEST_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer picortex "
                    f"(schema {current}, this one knows up to {LATEST_VERSION})"
                )
            for version in range(current + 1, LATEST_VERSION + 1):
                try:
                    self._conn.execute(MIGRATIONS[version - 1])
                except psycopg.Error as exc:
                    raise StoreError(
                        f"{self.path}: migration {version} failed ({reason(exc)})"
                    ) from None
                self._run("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        return LATEST_VERSION

    def schema_version(self) -> int:
        """The number of migrations applied (0 before the first)."""
        exists = self._one("SELECT to_regclass('schema_version') IS NOT NULL")
        if not exists:
            return 0
        return cast(int, self._one("SELECT coalesce(max(version), 0) FROM schema_version"))

    def data_version(self) -> object:
        """Changes when trust, runtime config or chat config changed (any process's commit).

        Heard at once while listening (`listen`); else read from the database at most once
        per COHERENCE_SECONDS, and once per BACKSTOP_SECONDS while a listener is up.
        """
        now = self._clock()
        listening = self._listener is not None and self._listener.listening
        every = BACKSTOP_SECONDS if listening else COHERENCE_SECONDS
        if now - self._version_at >= every:
            version = cast(int, self._one("SELECT version FROM config_changes"))
            self._version_at = now
            with self._version_lock:  # never back: the listener may have heard a newer one
                if self._version is None or version > self._version:
                    self._version = version
        with self._version_lock:
            return (self._version, self._reloads)

    # ---- transactions --------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction; nested uses become savepoints.

        Raises:
            StoreError: when PostgreSQL refuses the write or the commit.
        """
        with self._lock:
            depth = self._depth
            try:
                conn = self._link.live(in_transaction=depth > 0)
                self._depth = depth + 1
                try:
                    with conn.transaction():
                        yield
                finally:
                    self._depth = depth
            except psycopg.Error as exc:
                raise self._link.error(exc) from exc

    @contextlib.contextmanager
    def commit_group(self) -> Iterator[None]:
        """The store actor's group of writes: one transaction that can be found again.

        Raises:
            DatabaseUnreachable: the connection was lost; `in_doubt` names the transaction
                when it was lost during its COMMIT (`commit_status` tells what became of it).
            StoreError: when PostgreSQL refuses the group.
        """
        with self._lock:
            xid: int | None = None
            try:
                conn = self._link.live()
                self._depth = 1
                try:
                    with conn.transaction():
                        yield
                        # Asked last: a loss before this answer surely undid the group.
                        row = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
                        xid = None if row is None or row[0] is None else int(str(row[0]))
                finally:
                    self._depth = 0
            except psycopg.Error as exc:
                raise self._link.error(exc, in_doubt=xid) from exc

    def commit_status(self, xid: int) -> bool | None:
        """Whether transaction `xid` committed: True, False, or None while it still runs.

        Raises:
            DatabaseUnreachable: the database still cannot be reached.
        """
        status = self._one("SELECT pg_xact_status(%s::text::xid8)", (str(xid),))
        return None if status == "in progress" else status == "committed"

    def try_xact_lock(self, key: int) -> bool:
        """Inside a transaction: hold the advisory lock `key` until it ends; False at once
        when another session holds it."""
        return self._one("SELECT pg_try_advisory_xact_lock(%s)", (key,)) is True

    def _run(self, sql: str, params: tuple[object, ...] = ()) -> psycopg.Cursor[Row]:
        with self._lock:
            try:
                return self._link.live(in_transaction=self._depth > 0).execute(sql, params)
            except psycopg.Error as exc:
                raise self._link.error(exc) from exc

    def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[Row]:
        with self._lock:
            cur = self._run(sql, params)
            return cur.fetchall()

    def _one(self, sql: str, params: tuple[object, ...] = ()) -> object:
        rows = self._all(sql, params)
        return rows[0][0] if rows else None

    def _write(self, sql: str, params: tuple[object, ...] = ()) -> int:
        """Run one statement in its own transaction (or savepoint); the rows it changed."""
        with self.transaction():
            return self._run(sql, params).rowcount

    # ---- trust list ----------------------------------------------------------------------

    def get_tier(self, user_id: int) -> str | None:
        """The user's trust tier, or None when not on the list."""
        return cast(
            "str | None", self._one("SELECT tier FROM trust WHERE user_id = %s", (user_id,))
        )

    def set_tier(self, user_id: int, tier: str) -> None:
        """Add the user to the trust list, or change their tier."""
        if tier not in TRUST_TIERS:
            raise ValueError(f"tier must be one of {', '.join(TRUST_TIERS)}, got {tier!r}")
        self._write(
            "INSERT INTO trust (user_id, tier) VALUES (%s, %s) ON CONFLICT (user_id) DO UPDATE"
            " SET tier = excluded.tier, updated_at = extract(epoch FROM clock_timestamp())",
            (user_id, tier),
        )

    def remove_trust(self, user_id: int) -> bool:
        """Remove the user from the trust list; False when they were not on it."""
        return self._write("DELETE FROM trust WHERE user_id = %s", (user_id,)) > 0

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
            "INSERT INTO runtime_config (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
            " SET value = excluded.value, updated_at = extract(epoch FROM clock_timestamp())",
            (key, value),
        )

    def delete_runtime_config(self, key: str) -> bool:
        """Drop one runtime override, so the file's value applies again."""
        return self._write("DELETE FROM runtime_config WHERE key = %s", (key,)) > 0

    # ---- command tree --------------------------------------------------------------------

    def app_commands_hash(self, scope: str) -> str | None:
        """The digest of the command tree last registered in `scope` (SPEC 15)."""
        value = self._one("SELECT hash FROM app_commands WHERE scope = %s", (scope,))
        return value if isinstance(value, str) else None

    def set_app_commands_hash(self, scope: str, digest: str, now: float) -> None:
        """Remember that the tree with `digest` is registered in `scope`."""
        self._write(
            "INSERT INTO app_commands (scope, hash, registered_at) VALUES (%s, %s, %s)"
            " ON CONFLICT (scope) DO UPDATE SET hash = excluded.hash,"
            " registered_at = excluded.registered_at",
            (scope, digest, now),
        )

    # ---- chat config ---------------------------------------------------------------------

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        rows = self._all(_CHAT_COLUMNS + " WHERE chat_id = %s", (str(chat_id),))
        return _chat_config(rows[0]) if rows else None

    def chat_configs(self) -> list[ChatConfig]:
        """Every chat with its own settings, by chat id."""
        # Ids are kept as Discord's text: shorter is smaller, then by digits.
        rows = self._all(_CHAT_COLUMNS + " ORDER BY length(chat_id), chat_id")
        return [_chat_config(row) for row in rows]

    def set_attention_mode(self, chat_id: int, mode: str, now: float) -> None:
        """Set the chat's attention mode, keeping its other settings."""
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")
        self._write(
            "INSERT INTO chat_config (chat_id, attention_mode, updated_at) VALUES (%s, %s, %s)"
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
            " updated_at) VALUES (%s, %s, %s, %s) ON CONFLICT (chat_id) DO UPDATE"
            " SET discriminator_model = excluded.discriminator_model,"
            " discriminator_threshold = excluded.discriminator_threshold,"
            " updated_at = excluded.updated_at",
            (str(chat_id), model, threshold, now),
        )

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user."""
        rows = self._all(
            "SELECT chat_id, user_id, mode, updated_at FROM chat_user_attention"
            " ORDER BY length(chat_id), chat_id, user_id"
        )
        return [
            UserAttention(int(cast(str, c)), cast(int, u), cast(str, m), cast(float, t))
            for c, u, m, t in rows
        ]

    def set_user_attention(self, chat_id: int, user_id: int, mode: str, now: float) -> None:
        """Set a user's own attention mode in a chat."""
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")
        self._write(
            "INSERT INTO chat_user_attention (chat_id, user_id, mode, updated_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (chat_id, user_id) DO UPDATE"
            " SET mode = excluded.mode, updated_at = excluded.updated_at",
            (str(chat_id), user_id, mode, now),
        )

    def delete_user_attention(self, chat_id: int, user_id: int) -> bool:
        """Drop a user's own mode in a chat, so the chat's mode applies to them again."""
        changed = self._write(
            "DELETE FROM chat_user_attention WHERE chat_id = %s AND user_id = %s",
            (str(chat_id), user_id),
        )
        return changed > 0

    def delete_chat_config(self, chat_id: int) -> bool:
        """Forget the chat's own settings, so the defaults apply again."""
        return self._write("DELETE FROM chat_config WHERE chat_id = %s", (str(chat_id),)) > 0

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
        with self.transaction():
            row_id = self._one(
                "INSERT INTO invocation_errors (workspace_id, persona, signal_id, stage,"
                " error_message, stack_trace, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " RETURNING id",
                (
                    workspace_id,
                    persona,
                    str(signal_id),
                    stage,
                    error_message,
                    trim_stack_trace(stack_trace),
                    created_at,
                ),
            )
        return cast(int, row_id)

    def invocation_errors(self, unresolved_only: bool = False) -> list[InvocationError]:
        """Invocation errors, oldest first; only unresolved ones when asked."""
        where = " WHERE resolved_at IS NULL" if unresolved_only else ""
        rows = self._all(_ERROR_COLUMNS + where + " ORDER BY id")
        return [InvocationError(*row) for row in rows]  # type: ignore[arg-type]

    def unresolved_errors_since(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of each unresolved error made at `since` or later,
        oldest first: what composting counts."""
        rows = self._all(
            "SELECT persona, stage, created_at FROM invocation_errors"
            " WHERE resolved_at IS NULL AND created_at >= %s ORDER BY created_at, id",
            (since,),
        )
        return [(str(p), str(s), float(cast(float, at))) for p, s, at in rows]

    def invocation_error(self, error_id: int) -> InvocationError | None:
        """One invocation error by id, or None."""
        rows = self._all(_ERROR_COLUMNS + " WHERE id = %s", (error_id,))
        return InvocationError(*rows[0]) if rows else None  # type: ignore[arg-type]

    def resolve_invocation_error(self, error_id: int, resolution: str, resolved_at: float) -> bool:
        """Mark an error resolved; False when no error has that id."""
        if resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}")
        changed = self._write(
            "UPDATE invocation_errors SET resolution = %s, resolved_at = %s WHERE id = %s",
            (resolution, resolved_at, error_id),
        )
        return changed > 0

    @one_pruner
    def prune_resolved_errors(self, resolved_before: float) -> int:
        """Forget invocation errors resolved before `resolved_before`; unresolved ones stay."""
        return self._write(
            "DELETE FROM invocation_errors WHERE resolved_at IS NOT NULL AND resolved_at < %s",
            (resolved_before,),
        )

    @one_pruner
    def cap_unresolved_errors(self, keep: int) -> int:
        """Forget the oldest unresolved invocation errors beyond the newest `keep`."""
        return self._write(
            "DELETE FROM invocation_errors WHERE resolved_at IS NULL AND id < ("
            " SELECT id FROM invocation_errors WHERE resolved_at IS NULL"
            " ORDER BY id DESC LIMIT 1 OFFSET %s)",
            (max(keep, 1) - 1,),
        )

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
            " VALUES (%s, %s, %s, %s, %s)",
            (workspace, period_key, cost_usd, at, user_id),
        )

    def user_spend(self, user_id: int, since: float) -> float:
        """USD spent on calls made for the user since `since` (Unix seconds)."""
        value = self._one(
            "SELECT coalesce(sum(cost_usd), 0.0) FROM budget_ledger"
            " WHERE user_id = %s AND at >= %s",
            (user_id, since),
        )
        return float(cast(float, value))

    def spend_by_user(self, since: float) -> dict[int, float]:
        """USD spent since `since`, per user (calls made for a user only)."""
        rows = self._all(
            "SELECT user_id, sum(cost_usd) FROM budget_ledger"
            " WHERE user_id IS NOT NULL AND at >= %s GROUP BY user_id ORDER BY user_id",
            (since,),
        )
        return {cast(int, uid): float(cast(float, total)) for uid, total in rows}

    def spend(self, workspace: str, period_key: str) -> float:
        """USD spent by the workspace in the period."""
        value = self._one(
            "SELECT coalesce(sum(cost_usd), 0.0) FROM budget_ledger"
            " WHERE period_key = %s AND workspace = %s",
            (period_key, workspace),
        )
        return float(cast(float, value))

    def spend_by_workspace(self, period_key: str) -> dict[str, float]:
        """USD spent in the period, per workspace."""
        rows = self._all(
            "SELECT workspace, sum(cost_usd) FROM budget_ledger WHERE period_key = %s"
            " GROUP BY workspace ORDER BY workspace",
            (period_key,),
        )
        return {cast(str, ws): float(cast(float, total)) for ws, total in rows}

    @one_pruner
    def roll_up_ledger(self, before: float) -> int:
        """Merge the ledger rows before `before` into one row per UTC day, workspace, period
        and user, dated at the day's start; returns how many rows fewer there are."""
        with self.transaction():
            last = self._one("SELECT max(id) FROM budget_ledger WHERE at < %s", (before,))
            if last is None:
                return 0
            # The day's length is written out: as two parameters, PostgreSQL could not tell
            # that the day selected is the day grouped by.
            added = self._run(
                "INSERT INTO budget_ledger (workspace, period_key, cost_usd, at, user_id)"
                " SELECT workspace, period_key, sum(cost_usd), floor(at / 86400) * 86400, user_id"
                " FROM budget_ledger WHERE at < %s AND id <= %s"
                " GROUP BY workspace, period_key, user_id, floor(at / 86400) HAVING count(*) > 1",
                (before, last),
            ).rowcount
            removed = self._run(
                "DELETE FROM budget_ledger WHERE id IN (SELECT id FROM ("
                " SELECT id, count(*) OVER (PARTITION BY workspace, period_key, user_id,"
                " floor(at / 86400)) AS day_rows FROM budget_ledger WHERE at < %s AND id <= %s"
                ") AS merged WHERE day_rows > 1)",
                (before, last),
            ).rowcount
        return removed - added

    def daily_spend(self, since: float) -> list[tuple[str, str, float]]:
        """USD spent per workspace per UTC day (`YYYY-MM-DD`) since `since` (unix seconds)."""
        rows = self._all(
            "SELECT workspace, to_char(to_timestamp(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD'),"
            " sum(cost_usd) FROM budget_ledger WHERE at >= %s GROUP BY 1, 2 ORDER BY 2, 1",
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
            " author_name, content, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (message_id) DO UPDATE SET content = excluded.content,"
            " author_name = excluded.author_name"
            " WHERE memory_messages.content IS DISTINCT FROM excluded.content"
            " OR memory_messages.author_name IS DISTINCT FROM excluded.author_name",
            (message_id, channel_id, guild_id, author_id, author_name, content, created_at),
        )

    def delete_memory_message(self, message_id: int) -> bool:
        """Forget a message (deleted on Discord); False when it was not stored."""
        return self.forget_messages([message_id]) > 0

    def forget_messages(self, message_ids: Iterable[int]) -> int:
        """Forget messages deleted on Discord and every observation made of them, at once;
        returns how many stored messages were dropped."""
        ids = [int(i) for i in message_ids]
        with self.transaction():
            self._run(
                "DELETE FROM memory_observations WHERE message_id = ANY(%s::bigint[])", (ids,)
            )
            return self._run(
                "DELETE FROM memory_messages WHERE message_id = ANY(%s::bigint[])", (ids,)
            ).rowcount

    def reindex_memory_message(self, message_id: int, content: str) -> int | None:
        """Apply an edit: the stored text becomes `content`; observations of the old text go.
        Returns the stored message's author id, or None when it was not stored."""
        with self.transaction():
            self._run(
                "UPDATE memory_messages SET content = %s"
                " WHERE message_id = %s AND content IS DISTINCT FROM %s",
                (content, message_id, content),
            )
            self._run("DELETE FROM memory_observations WHERE message_id = %s", (message_id,))
            author = self._one(
                "SELECT author_id FROM memory_messages WHERE message_id = %s", (message_id,)
            )
        return cast("int | None", author)

    def forget_channel(self, channel_id: int) -> int:
        """Forget every stored message and observation of a deleted channel or thread."""
        with self.transaction():
            dropped = self._run(
                "DELETE FROM memory_messages WHERE channel_id = %s", (channel_id,)
            ).rowcount
            return (
                dropped
                + self._run(
                    "DELETE FROM memory_observations WHERE channel_id = %s", (channel_id,)
                ).rowcount
            )

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
        recorded."""
        changed = self._write(
            "INSERT INTO memory_observations (persona, message_id, channel_id, guild_id,"
            " trigger, content, created_at, author_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (persona, message_id, trigger) DO NOTHING",
            (persona, message_id, channel_id, guild_id, trigger, content, created_at, author_id),
        )
        return changed > 0

    def forget_user(self, user_id: int) -> tuple[int, int]:
        """Forget everything a person said, at once: (messages, observations) dropped."""
        with self.transaction():
            observations = self._run(
                "DELETE FROM memory_observations WHERE author_id = %s OR message_id IN"
                " (SELECT message_id FROM memory_messages WHERE author_id = %s)",
                (user_id, user_id),
            ).rowcount
            messages = self._run(
                "DELETE FROM memory_messages WHERE author_id = %s", (user_id,)
            ).rowcount
        return messages, observations

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
        """Messages and observations since `since` matching any word of `query`, best first
        (see `Store.search_memory`); the score is minus `ts_rank`, so lower is better."""
        terms = query_terms(query)
        if not terms or limit <= 0:
            return []
        channels: list[int] | None = None
        if channel_id is not None or channel_ids is not None:
            wanted = [*(channel_ids or ()), *(() if channel_id is None else (channel_id,))]
            channels = [int(c) for c in wanted]
        guild: int | None = None
        if workspace is not None and workspace != DM_WORKSPACE:
            if not workspace.isdigit():
                return []
            guild = int(workspace)
        # Each word a quoted lexeme: `\w+` words hold no quote, so no text is query syntax.
        match = " | ".join(f"'{term}'" for term in terms)
        params = (since, workspace is None, workspace == DM_WORKSPACE, guild, channels, channels)
        rows = self._all(_SEARCH_SQL, (match, *params, match, *params, limit))
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
                score=float(cast(float, score)),
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

    @one_pruner
    def prune_memory(self, older_than: float) -> int:
        """Forget stored messages and observations older than `older_than` (Unix seconds)."""
        with self.transaction():
            dropped = self._run(
                "DELETE FROM memory_messages WHERE created_at < %s", (older_than,)
            ).rowcount
            dropped += self._run(
                "DELETE FROM memory_observations WHERE created_at < %s", (older_than,)
            ).rowcount
        return dropped

    # ---- handled ids and channel activity ------------------------------------------------

    def mark_seen_many(self, rows: list[tuple[int, float, int | None]]) -> None:
        """Remember many handled message ids (id, seen_at, guild_id) in one round of
        statements."""
        with self.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO seen_events (message_id, seen_at, guild_id) VALUES (%s, %s, %s)"
                " ON CONFLICT (message_id) DO NOTHING",
                rows,
            )

    def newest_seen(self, limit: int, shards: Iterable[Shard] | None = None) -> list[int]:
        """The `limit` highest handled message ids, highest first; of `shards` only when
        given (marks without a guild count for every shard)."""
        rows = self._all(
            "SELECT message_id FROM seen_events WHERE %s::bigint IS NULL OR guild_id IS NULL"
            " OR (guild_id >> 22) %% %s = ANY(%s::bigint[]) ORDER BY message_id DESC LIMIT %s",
            (*_shard_params(shards), limit),
        )
        return [cast(int, row[0]) for row in rows]

    def shard_seen_since(self, shard: Shard, first_id: int) -> list[int]:
        """The handled message ids from `first_id` up of one shard (and those without a
        guild), lowest first."""
        rows = self._all(
            "SELECT message_id FROM seen_events WHERE message_id >= %s"
            " AND (%s::bigint IS NULL OR guild_id IS NULL"
            " OR (guild_id >> 22) %% %s = ANY(%s::bigint[])) ORDER BY message_id",
            (first_id, *_shard_params([shard])),
        )
        return [cast(int, row[0]) for row in rows]

    def is_seen(self, message_id: int) -> bool:
        """Whether the message id was handled before."""
        return self._one("SELECT 1 FROM seen_events WHERE message_id = %s", (message_id,)) == 1

    @one_pruner
    def prune_seen(self, older_than: float) -> int:
        """Forget ids seen before `older_than`; returns how many were dropped."""
        return self._write("DELETE FROM seen_events WHERE seen_at < %s", (older_than,))

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None:
        """The channel had a message handled: catch-up after a new session looks at it."""
        self._write(
            "INSERT INTO channel_activity (channel_id, guild_id, last_handled_id, active_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (channel_id) DO UPDATE SET"
            " last_handled_id = greatest(channel_activity.last_handled_id,"
            " excluded.last_handled_id),"
            " guild_id = coalesce(excluded.guild_id, channel_activity.guild_id),"
            " active_at = excluded.active_at",
            (channel_id, guild_id, last_handled_id, at),
        )

    def active_channels(
        self, since: float, limit: int, shards: Iterable[Shard] | None = None
    ) -> list[tuple[int, int | None, int]]:
        """(channel_id, guild_id, last_handled_id) of channels active since `since`, newest
        first; of `shards` only (DMs are shard 0) when given."""
        rows = self._all(
            "SELECT channel_id, guild_id, last_handled_id FROM channel_activity"
            " WHERE active_at >= %s AND (%s::bigint IS NULL"
            " OR coalesce((guild_id >> 22) %% %s, 0) = ANY(%s::bigint[]))"
            " ORDER BY active_at DESC LIMIT %s",
            (since, *_shard_params(shards), limit),
        )
        return [(cast(int, c), cast("int | None", g), cast(int, m)) for c, g, m in rows]

    def forget_channel_activity(self, channel_id: int) -> None:
        """A deleted channel is never caught up."""
        self._write("DELETE FROM channel_activity WHERE channel_id = %s", (channel_id,))

    # ---- gateway session -----------------------------------------------------------------

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        """The persisted (session_id, resume_gateway_url, seq) of a shard, if any."""
        rows = self._all(
            "SELECT session_id, resume_gateway_url, seq FROM gateway_session"
            " WHERE shard_id = %s AND shard_count = %s",
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
            " seq, updated_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (shard_id) DO UPDATE"
            " SET shard_count = excluded.shard_count, session_id = excluded.session_id,"
            " resume_gateway_url = excluded.resume_gateway_url, seq = excluded.seq,"
            " updated_at = excluded.updated_at",
            (shard[0], shard[1], session_id, url, seq, at),
        )

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        """The session ended (a clean shutdown, or Discord invalidated it)."""
        self._write("DELETE FROM gateway_session WHERE shard_id = %s", (shard[0],))

    def gateway_sessions(self) -> list[SavedSession]:
        """Every shard's saved session, by shard id."""
        rows = self._all(
            "SELECT shard_id, shard_count, session_id, seq, updated_at FROM gateway_session"
            " ORDER BY shard_id"
        )
        return [SavedSession(*cast("tuple[int, int, str, int, float]", row)) for row in rows]

    # ---- cluster processes (SPEC 17) -----------------------------------------------------

    def note_node(self, node: ClusterNode) -> None:
        """A process's heartbeat: who it is, what it serves, when it last said so."""
        self._write(
            "INSERT INTO cluster_node (node, host, pid, shards, started_at, last_seen)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (node) DO UPDATE"
            " SET host = excluded.host, pid = excluded.pid, shards = excluded.shards,"
            " started_at = excluded.started_at, last_seen = excluded.last_seen",
            (node.node, node.host, node.pid, node.shards, node.started_at, node.last_seen),
        )

    def forget_nodes(self, before: float) -> int:
        """Drop processes silent since `before` (gone for good); how many."""
        return self._write("DELETE FROM cluster_node WHERE last_seen < %s", (before,))

    def cluster_nodes(self) -> list[ClusterNode]:
        """Every process that told its heartbeat, by node name."""
        rows = self._all(
            "SELECT node, host, pid, shards, started_at, last_seen FROM cluster_node ORDER BY node"
        )
        return [ClusterNode(*cast("tuple[str, str, int, str, float, float]", row)) for row in rows]


def _chat_config(row: Row) -> ChatConfig:
    chat_id, mode, model, threshold, updated_at = row
    return ChatConfig(
        chat_id=int(cast(str, chat_id)),
        attention_mode=cast("str | None", mode),
        discriminator_model=cast("str | None", model),
        discriminator_threshold=cast("float | None", threshold),
        updated_at=cast(float, updated_at),
    )


_CHAT_COLUMNS: Final = (
    "SELECT chat_id, attention_mode, discriminator_model, discriminator_threshold,"
    " updated_at FROM chat_config"
)

_ERROR_COLUMNS: Final = (
    "SELECT id, workspace_id, persona, signal_id, stage, error_message, stack_trace,"
    " created_at, resolved_at, resolution FROM invocation_errors"
)

# One fixed statement; filters switch on through parameters, the same for each table: the
# tsquery, since, all workspaces, DMs only, guild id, channel ids (an array, or NULL for all).
_SEARCH_SQL: Final = """
SELECT * FROM (
    SELECT 'message' AS kind, message_id, channel_id, guild_id, author_name,
           NULL::text AS persona, NULL::text AS trigger, content, created_at,
           -ts_rank(words, q) AS score, author_id
    FROM memory_messages, to_tsquery('picortex_words', %s) AS q
    WHERE words @@ q AND created_at >= %s
      AND (%s OR (%s AND guild_id IS NULL) OR guild_id = %s)
      AND (%s::bigint[] IS NULL OR channel_id = ANY(%s::bigint[]))
    UNION ALL
    SELECT 'observation', message_id, channel_id, guild_id, NULL, persona, trigger,
           content, created_at, -ts_rank(words, q), author_id
    FROM memory_observations, to_tsquery('picortex_words', %s) AS q
    WHERE words @@ q AND created_at >= %s
      AND (%s OR (%s AND guild_id IS NULL) OR guild_id = %s)
      AND (%s::bigint[] IS NULL OR channel_id = ANY(%s::bigint[]))
) AS hits
ORDER BY score, created_at DESC
LIMIT %s
"""


def _shard_params(shards: Iterable[Shard] | None) -> tuple[int | None, int | None, list[int]]:
    """What a query of some shards' rows passes: their count (NULL: every shard) twice,
    then their ids. Rows are of the shard `(guild_id >> 22) % count`."""
    scope = shard_scope(shards)
    if scope is None:
        return None, None, []
    return scope.count, scope.count, list(scope.ids)
