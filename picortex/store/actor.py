"""The store actor: `picortex.db` on a thread of its own, writes committed in groups.

The event loop never waits on SQLite. Writes are queued; one worker thread owns the
connection and commits them in groups (one transaction per GROUP_SECONDS or GROUP_ROWS,
whichever comes first), so SQLite's busy waits (another process holding the write lock)
happen there, never on the event loop. A caller that must know its write is durable (a trust
change, a handled mark) awaits `flush()`. What the decision path reads (trust tiers, chat
config, runtime config, handled message ids) is served from memory: this process's writes
change it at once, and another process's commits (`picortex config set`) are seen through
SQLite's `data_version` (PostgreSQL: a notification per change, heard by a listener thread,
with a slow poll as backstop), looked at on the worker thread, and reloaded.

When a shared database (PostgreSQL) cannot be reached, queued writes are kept, in order, and
committed once it is back (a group whose COMMIT went unanswered is looked up first, never
applied twice); a caller that waits is told at once, and `OutageWatch` says so once a minute.

Every query stays behind `Store` (the one place that speaks SQL; `PgDatabase` speaks the
same methods to PostgreSQL, whose other processes' commits show as a changed counter);
this class only decides where and when those queries run. The rest of picortex calls it by
the named queries of `picortex.store.queries.StoreQueries` only.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar, cast

import attrs
import trio

import picortex.store.unsent as unsent
from picortex.errors import DatabaseUnreachable, StoreError
from picortex.store.chathome import ChatHome
from picortex.store.seen import ANY_GUILD, SeenIds
from picortex.store.shards import ADOPT_SECONDS, Shard
from picortex.store.store import (
    TRUST_TIERS,
    ChatConfig,
    InvocationError,
    MemoryHit,
    Store,
    UserAttention,
)
from picortex.types import snowflake_at

if TYPE_CHECKING:
    from picortex.store.database import Database
    from picortex.store.pg.cluster import ClusterNode
    from picortex.store.pg.database import PgDatabase
    from picortex.store.pg.leases import ShardLeases
    from picortex.types import EventSink

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A group is committed this long after its first write at most: a durable write waits no
# longer than this plus one commit, and a burst costs one transaction per few tens of
# milliseconds. Longer than an instant answer takes, so a trigger's writes and its answer's
# share one commit, made after the reply is posted rather than while it is being made.
GROUP_SECONDS: Final = 0.02
# ... or as soon as it holds this many writes, so one transaction never grows unbounded.
GROUP_ROWS: Final = 500
# How often the worker looks for another process's commits (one cheap pragma), so that
# `picortex config set` reaches the running bot at once without a query per message. A
# database that tells of them as they commit (PostgreSQL's listener) wakes the worker
# instead, and is looked at only as often as its own `coherence_seconds` says.
COHERENCE_SECONDS: Final = 0.02
# Handled message ids kept in memory. Ids are time-ordered snowflakes: an id above the
# highest one let go is known unseen without a query; only an older replay asks SQLite.
SEEN_MEMORY: Final = 100_000
# Budget periods whose spend is kept in memory (the current one and the one before).
SPEND_PERIODS: Final = 2
# At shutdown, queued writes get this long to be committed.
FLUSH_GRACE_SECONDS: Final = 10.0

# A database that stays unreachable is complained about once per this long, per complaint.
COMPLAINT_SECONDS: Final = 60.0
# While the shared database is unreachable, the kept writes are tried again this often (the
# connection itself is made again no more often than its backoff allows).
RETRY_SECONDS: Final = 0.5

_WRITE: Final = 0
_READ: Final = 1
_SEEN: Final = 2
_STOP: Final = 3

Finish = Callable[[bool, object], None]


@attrs.define(slots=True)
class _Op:
    kind: int
    fn: Callable[[Database], object] | None = None
    row: tuple[int, float, int | None] | None = None
    finish: Finish | None = None
    seq: int = 0
    told: bool = False  # counted in an `on_worker_ops(+n)`: the worker counts it back
    # Kept while the shared database is unreachable, committed once it is back; False for
    # a caller that waits (told the error at once) and for what is stale by then.
    keep: bool = True
    # A write by name: the Database method and its arguments, all plain values, so that a
    # store stopped while the database is unreachable can keep it in a file (`unsent`).
    named: tuple[str, tuple[object, ...], dict[str, object]] | None = None


class _Complaints:
    """When a repeated complaint is due again: once per `every` seconds for each kind."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._last: dict[str, float] = {}

    def due(self, kind: str) -> bool:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._every:
            return False
        self._last[kind] = now
        return True


@attrs.frozen
class _Snapshot:
    """What the decision path reads, as committed when `seq` was the last write applied."""

    seq: int
    trust: dict[int, str]
    chats: dict[int, ChatConfig]
    runtime: dict[str, str]
    user_modes: dict[tuple[int, int], UserAttention]


class StoreActor:
    """The store's owner: queued writes on one thread, read models in memory."""

    def __init__(self, store: Database, *, shards: Sequence[Shard] = ((0, 1),)) -> None:
        """`shards`: those this process serves (none yet: the handled ids of all are read)."""
        self.db = store  # used by the worker thread; elsewhere only before it starts
        # A second connection for the few reads made on the event loop (a budget period's
        # first total, the panel's pages): in WAL a reader never waits for a writer, so
        # they never queue behind a group the worker holds open.
        self._reader: Database | None = None
        self._queue: queue.SimpleQueue[list[_Op]] = queue.SimpleQueue()
        # Ops queued during one scheduler round, handed to the worker together: one wake-up
        # of the thread (and one GIL hand-off) per round, not one per write.
        self._outbox: list[_Op] = []
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._seq = 0  # writes queued so far that change a read model
        self._done_seq = 0  # ... of which committed (worker side)
        self._pending: list[tuple[int, Callable[[], None]]] = []
        snap = self._load(0)
        self._trust = snap.trust
        self._chats = snap.chats
        self._runtime = snap.runtime
        self._user_modes = snap.user_modes
        self.config_version = 0  # bumped whenever the runtime config changes
        self._data_version = store.data_version()
        self._news = False  # the listener told of another process's change (its thread)
        # The newest handled ids of the shards served: the floor holds for them (and a
        # shard taken over later brings a floor of its own, `adopt_shard`).
        self._seen = SeenIds(SEEN_MEMORY, store.newest_seen(SEEN_MEMORY + 1, shards or None))
        self._spend: dict[str, dict[str, float]] = {}  # period key -> workspace -> USD
        self._user_spend: dict[float, dict[int, float]] = {}  # day start -> user -> USD
        self.commits = 0  # transactions committed (for tests and benches)
        # Told on the event loop when ops go to the worker thread (+n) and once it is done
        # with them (-n), results already on their way: for a test clock that must not jump
        # while the thread works. None in a running bot: no extra hand-back per group.
        self.on_worker_ops: Callable[[int], None] | None = None
        # How long writes wait for company before their group commits. A test clock held
        # while the thread works would spend this wall time on every group: it sets 0.
        self.group_seconds = GROUP_SECONDS
        self._complaints = _Complaints(COMPLAINT_SECONDS)
        # The shards this process serves, as its cluster heartbeat tells (PostgreSQL only);
        # catch-up reads their channels.
        self.shards: tuple[tuple[int, int], ...] = tuple(shards)
        # Its name in the cluster (None: host and pid), and whether it still tells its
        # heartbeat (not once it has handed its shards back and left).
        self.node: str | None = None
        self.beating = True
        # Where an unreachable database is told (the action log), once the bot has one.
        self.events: EventSink | None = None
        # Worker side, while the shared database is unreachable: writes kept (counted), and
        # the group whose COMMIT went unanswered (transaction id, its ops and their results).
        self.kept = 0
        self._doubt: tuple[int, list[_Op], list[tuple[bool, object]]] | None = None
        self._told_back = 0  # ops told to `on_worker_ops` and done with since the last count
        self._unreachable: DatabaseUnreachable | None = None  # why the last group was kept
        # Where a stop with the database unreachable keeps its writes (`replay_unsent`).
        self.unsent_path: Path | None = None

    @classmethod
    def open(cls, path: Path) -> StoreActor:
        """Open (creating and migrating if needed) the database at `path`.

        Raises:
            StoreError: one sentence when the file cannot be opened or migrated.
        """
        return cls(Store.open(path))

    @property
    def clustered(self) -> bool:
        """Whether processes share the database (PostgreSQL, SPEC 17)."""
        return self.db.clustered

    def shard_leases(self) -> ShardLeases:
        """(PostgreSQL) the shard lease statements, on a connection of their own."""
        from picortex.store.pg.leases import ShardLeases

        return ShardLeases.beside(cast("PgDatabase", self.db))

    @property
    def path(self) -> Any:
        """The database file."""
        return self.db.path

    def database_state(self) -> str:
        """What `picortex status` shows: "up", or "unreachable since <when>"."""
        from picortex.store.outage import database_state

        return database_state(self.db.unreachable_since)

    # ---- lifecycle -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the worker; commit what is queued when stopped."""
        self._token = trio.lowlevel.current_trio_token()
        self._start()
        task_status.started()
        try:
            if self.db.clustered:
                from picortex.store.outage import OutageWatch

                db = self.db
                watch = OutageWatch(
                    str(db.path), lambda: db.unreachable_since, lambda: self.kept, self.events
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch.run)
                    await self._heartbeat()
            await trio.sleep_forever()
        finally:
            with trio.move_on_after(FLUSH_GRACE_SECONDS, shield=True):
                try:
                    await self.flush()
                except StoreError as exc:
                    logger.error("queued writes lost at shutdown: %s", exc)

    async def _heartbeat(self) -> NoReturn:
        """Tell the cluster every few seconds that this process runs, and its shards."""
        from picortex.store.pg.cluster import FORGET_SECONDS, HEARTBEAT_SECONDS, this_node

        started_at = time.time()
        while True:
            now = time.time()
            node = this_node(self.shards, started_at, now, self.node)

            def beat(db: Database, node: ClusterNode = node, now: float = now) -> None:
                pg = cast("PgDatabase", db)
                pg.note_node(node)
                pg.forget_nodes(now - FORGET_SECONDS)

            if self.beating:
                self._put(_Op(_WRITE, fn=beat, finish=self._heartbeat_done, keep=False))
            await trio.sleep(HEARTBEAT_SECONDS)

    def _heartbeat_done(self, ok: bool, value: object) -> None:
        """(worker thread) A heartbeat that failed: the database is unreachable, said once
        a minute however often it beats meanwhile."""
        if (
            not ok
            and not isinstance(value, DatabaseUnreachable)
            and self._complaints.due("heartbeat")
        ):
            logger.error("could not tell the cluster this process runs: %s", value)

    def close(self) -> None:
        """Commit what is queued, stop the worker and close the connection (idempotent)."""
        self._handover()
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put([_Op(_STOP)])
            thread.join(FLUSH_GRACE_SECONDS)
        self._thread = None
        if self._reader is not None:
            self._reader.close()
        self.db.close()

    def _reads(self) -> Database:
        """The read connection (opened on first use)."""
        if self._reader is None:
            self._reader = self.db.reopen()
        return self._reader

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="picortex-store", daemon=True)
            self._thread.start()
            # PostgreSQL: other processes' changes heard as they commit, and the worker told.
            self.db.listen(self._told_of_change)

    def _told_of_change(self) -> None:
        """(the listener's thread) Another process committed a change: look now."""
        self._news = True
        self._queue.put([])

    # ---- queueing ------------------------------------------------------------------------

    def _put(self, op: _Op) -> None:
        outbox = self._outbox
        outbox.append(op)
        if len(outbox) > 1:
            return  # a hand-over is already scheduled
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self._handover)
            except trio.RunFinishedError:
                self._token = None
            else:
                return
        self._handover()

    def _handover(self) -> None:
        """Give the worker every op queued since the last hand-over."""
        ops = self._outbox
        if ops:
            self._outbox = []
            self._start()
            if self.on_worker_ops is not None and self._token is not None:
                for op in ops:
                    op.told = True
                self.on_worker_ops(len(ops))
            self._queue.put(ops)

    def _submit(
        self,
        fn: Callable[[Database], object],
        on_done: Callable[[object], None] | None = None,
        *,
        named: tuple[str, tuple[object, ...], dict[str, object]] | None = None,
    ) -> None:
        """Queue a write; `on_done(result)` runs on the event loop once it is committed."""
        finish: Finish | None = None
        if on_done is not None:
            token = trio.lowlevel.current_trio_token()

            def finish(ok: bool, value: object) -> None:
                if ok:
                    _soon(token, on_done, value)

        self._put(_Op(_WRITE, fn=fn, finish=finish, named=named))

    def _submit_named(
        self,
        name: str,
        *args: object,
        on_done: Callable[[object], None] | None = None,
        **kwargs: object,
    ) -> None:
        """Queue write `name(*args, **kwargs)` (a Database method, plain values): one that a
        stop while the database is unreachable keeps for the next start."""
        self._submit(_named(name, args, kwargs), on_done, named=(name, args, kwargs))

    async def call(self, fn: Callable[[Database], T], *, write: bool = True) -> T:
        """Run `fn(store)` on the store thread after everything queued before it; its result.

        For `picortex.store` and tests only: the rest of picortex uses the named queries.

        A write is committed (durable) when this returns.

        Raises:
            Exception: whatever `fn` raised, or StoreError when the commit failed.
            DatabaseUnreachable: the shared database cannot be reached; said at once, while
                the queued writes before this one are kept for when it is back.
        """
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[tuple[bool, object]] = []

        def finish(ok: bool, value: object) -> None:
            box.append((ok, value))
            _soon(token, done.set)

        self._put(_Op(_WRITE if write else _READ, fn=fn, finish=finish, keep=False))
        await done.wait()
        ok, value = box[0]
        if not ok:
            raise cast(BaseException, value)
        return cast(T, value)

    async def read(self, fn: Callable[[Database], T]) -> T:
        """Run a query on the store thread (it sees every write queued before it).

        For `picortex.store` and tests only: the rest of picortex uses the named queries.
        """
        return await self.call(fn, write=False)

    async def flush(self) -> None:
        """Wait until every write queued so far is committed.

        Raises:
            StoreError: when the group holding them could not be committed.
        """
        await self.call(_nothing)

    def _model_write(self, change: Callable[[], None], name: str, *args: object) -> None:
        """Queue write `name(*args)`, which a read model mirrors; apply `change` to the model
        now."""
        self._seq += 1
        seq = self._seq
        change()
        self._pending.append((seq, change))
        self._put(_Op(_WRITE, fn=_named(name, args, {}), seq=seq, named=(name, args, {})))

    # ---- the worker thread ----------------------------------------------------------------

    def _work(self) -> None:
        q = self._queue
        pending: deque[_Op] = deque()
        last_check = time.monotonic()
        every = self.db.coherence_seconds or COHERENCE_SECONDS
        waiting = False  # the last group was kept: the database is unreachable
        while True:
            if not pending:
                with contextlib.suppress(queue.Empty):
                    pending.extend(q.get(timeout=every))
                if not pending:  # nothing came, or the listener told of a change
                    self._news = False
                    if not self._check_foreign():
                        return
                    last_check = time.monotonic()
                    if self._doubt is None:
                        continue
            elif waiting:
                # Kept writes are tried again at a calm pace; what arrives meanwhile joins.
                with contextlib.suppress(queue.Empty):
                    pending.extend(q.get(timeout=RETRY_SECONDS))
            # Writes wait up to `group_seconds` for company, unless a read (or stop) is
            # already waiting behind them.
            urgent = any(op.kind in (_READ, _STOP) for op in pending)
            deadline = time.monotonic() + self.group_seconds
            while not urgent and not waiting and len(pending) < GROUP_ROWS:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    more = q.get(timeout=left)
                except queue.Empty:
                    break
                pending.extend(more)
                urgent = any(op.kind in (_READ, _STOP) for op in more)
            batch: list[_Op] = []
            while pending and len(batch) < GROUP_ROWS:
                op = pending.popleft()
                batch.append(op)
                if op.kind in (_READ, _STOP):
                    break
            stop, kept = self._commit(batch)
            pending.extendleft(reversed(kept))
            waiting = bool(kept) or self._doubt is not None
            if waiting and self._shed(pending):
                stop = True
            if waiting or self.kept:  # counted only around an outage: a burst costs nothing
                self.kept = sum(op.kind != _STOP for op in pending) + len(
                    self._doubt[1] if self._doubt else ()
                )
            told, self._told_back = self._told_back, 0
            watch, token = self.on_worker_ops, self._token
            if told and watch is not None and token is not None:
                _soon(token, watch, -told)
            now = time.monotonic()
            if stop:
                if kept or self._doubt is not None:
                    self._keep_unsent(pending)
                return
            if self._news or now - last_check >= every:
                self._news = False
                if not self._check_foreign():
                    return
                last_check = now

    def _keep_unsent(self, pending: deque[_Op]) -> None:
        """(worker) Stopping with the database unreachable: the writes kept go to the home's
        file for the next start (`replay_unsent`); what cannot be kept by name is counted
        lost, and a group whose COMMIT went unanswered is named as in doubt (it may be in)."""
        records: list[dict[str, object]] = []
        lost = 0
        for op in pending:
            if op.kind == _SEEN and op.row is not None:
                records.append({"seen": list(op.row)})
            elif op.kind == _WRITE and op.named is not None:
                name, args, kwargs = op.named
                records.append({"write": name, "args": list(args), "kwargs": kwargs})
            elif op.kind == _WRITE and op.fn is not _nothing:
                lost += 1
        doubt = len(self._doubt[1]) if self._doubt is not None else 0
        path = self.unsent_path
        kept = 0
        if path is not None and records:
            try:
                kept = unsent.save(path, records)
            except (OSError, TypeError) as exc:
                logger.error("could not keep the unsent writes in %s: %s", path.name, exc)
        lost += len(records) - kept
        logger.error(
            "the store stopped with the database unreachable: %d writes kept in %s for the"
            " next start, %d lost, %d in doubt (their commit went unanswered)",
            kept,
            "-" if path is None else path.name,
            lost,
            doubt,
        )

    def replay_unsent(self, path: Path) -> int:
        """Queue, before anything else, the writes a stop kept in `path` (the database was
        unreachable then); the file goes once they are committed, and a stop meanwhile keeps
        them again. How many were queued."""
        self.unsent_path = path
        records = unsent.load(path)
        if not records:
            unsent.forget(path)  # none, or only damaged lines (said)
            return 0
        count = 0
        for record in records:
            seen, name = record.get("seen"), record.get("write")
            args, kwargs = record.get("args", []), record.get("kwargs", {})
            if isinstance(seen, list) and len(seen) == 3 and _plain_seen(seen):
                message_id, at, guild_id = seen
                self.mark_handled(message_id, float(at), guild_id)
            elif name in MODEL_WRITES and isinstance(args, list) and not kwargs:
                # Through the method itself: the read model takes the change at once too.
                try:
                    getattr(self, str(name))(*args)
                except (TypeError, ValueError, StoreError) as exc:
                    logger.error(
                        "%s holds a write that cannot be made (%s); skipped", path.name, exc
                    )
                    continue
            elif name in NAMED_WRITES and isinstance(args, list) and isinstance(kwargs, dict):
                named = (str(name), tuple(args), dict(kwargs))
                self._put(_Op(_WRITE, fn=_named(*named), named=named))
            else:
                logger.error("%s holds a write this store does not make; skipped", path.name)
                continue
            count += 1
        if count:
            logger.info("%d writes kept by the last run are committed now", count)

        def done(ok: bool, value: object) -> None:
            if ok:
                unsent.forget(path)

        self._put(_Op(_WRITE, fn=_nothing, finish=done))
        return count

    def _commit(self, batch: list[_Op]) -> tuple[bool, list[_Op]]:
        """Commit the batch's writes in one transaction, then run its read.

        Returns whether it holds a stop, and the writes kept because the shared database
        is unreachable (the caller puts them back first in line).
        """
        db = self.db
        writes = [op for op in batch if op.kind in (_WRITE, _SEEN)]
        unreachable: DatabaseUnreachable | None = None
        if self._doubt is not None:
            try:
                writes = self._settle_doubt() + writes
            except DatabaseUnreachable as exc:
                unreachable = exc
        if writes and unreachable is None:
            results: list[tuple[bool, object]] = []
            seen: list[tuple[int, float, int | None]] = []
            try:
                with db.commit_group():
                    for op in writes:
                        if op.kind == _SEEN:
                            assert op.row is not None
                            seen.append(op.row)
                            results.append((True, None))
                            continue
                        assert op.fn is not None
                        try:
                            results.append((True, op.fn(db)))  # a savepoint each
                        except Exception as exc:
                            results.append((False, exc))
                    if seen:
                        db.mark_seen_many(seen)
                self.commits += 1
            except DatabaseUnreachable as exc:
                if exc.in_doubt is not None:
                    # Its COMMIT went unanswered: found out once the database is back.
                    self._doubt = (exc.in_doubt, writes, results)
                    self._untell(writes)
                    writes, results = [], []
                else:
                    unreachable = exc
            except Exception as exc:
                # A shared database that fails every group is said once a minute (SPEC 17);
                # a local file's failure is said each time.
                if not db.clustered or self._complaints.due("commit"):
                    logger.error("a group of %d writes was not committed: %s", len(writes), exc)
                failed = StoreError(f"not committed: {exc}")
                results = [(False, failed)] * len(writes)
            if unreachable is None:
                self._finish(writes, results)
        kept: list[_Op] = []
        self._unreachable = unreachable
        if unreachable is not None:
            self._untell([op for op in writes if op.keep])
            # Nothing of the group committed: each write is kept for when the database is
            # back, unless its caller waits (it is told now).
            for op in writes:
                if op.keep:
                    kept.append(op)
                else:
                    self._done(op, False, unreachable)
        stop = False
        for op in batch:
            if op.kind == _STOP:
                stop = True
                self._done(op, True, None)
            elif op.kind == _READ:
                assert op.fn is not None and op.finish is not None
                if unreachable is not None:
                    self._done(op, False, unreachable)
                    continue
                try:
                    value = op.fn(db)
                except Exception as exc:
                    self._done(op, False, exc)
                else:
                    self._done(op, True, value)
        return stop, kept

    def _shed(self, pending: deque[_Op]) -> bool:
        """(worker) The database is unreachable: whoever waits in line is told so now, not
        once it is back; True when a stop is in line (the kept writes cannot wait longer)."""
        error = self._unreachable or DatabaseUnreachable(f"{self.db.path} cannot be reached")
        stop = False
        for op in [op for op in pending if not op.keep or op.kind == _STOP]:
            pending.remove(op)
            stop = stop or op.kind == _STOP
            self._done(op, op.kind == _STOP, None if op.kind == _STOP else error)
        return stop

    def _settle_doubt(self) -> list[_Op]:
        """(worker) The group whose COMMIT went unanswered: its writes are done if it
        committed; else they are returned, to be committed now.

        Raises:
            DatabaseUnreachable: while what became of it cannot be known.
        """
        assert self._doubt is not None
        xid, writes, results = self._doubt
        committed = cast("PgDatabase", self.db).commit_status(xid)
        if committed is None:
            raise DatabaseUnreachable(f"{self.db.path}: a group's commit is still unknown")
        self._doubt = None
        if not committed:
            return writes
        self.commits += 1
        self._finish(writes, results)
        return []

    def _untell(self, ops: list[_Op]) -> None:
        """(worker) Ops put aside until the database is back are not being worked on: a
        test clock watching `on_worker_ops` may move meanwhile."""
        for op in ops:
            if op.told:
                op.told = False
                self._told_back += 1

    def _finish(self, writes: list[_Op], results: list[tuple[bool, object]]) -> None:
        """(worker) Tell each write of a group its result."""
        if writes:
            self._done_seq = max(self._done_seq, *(op.seq for op in writes))
        for op, (ok, value) in zip(writes, results, strict=True):
            self._done(op, ok, value)

    def _done(self, op: _Op, ok: bool, value: object) -> None:
        """(worker) One op is done with: its caller told, its hand-over counted back."""
        if op.told:
            self._told_back += 1
        if op.finish is not None:
            op.finish(ok, value)
        elif not ok and op.kind != _READ:
            logger.error("a queued write failed: %s", value)

    def _check_foreign(self) -> bool:
        """Reload the read models when another connection committed (worker thread).

        Returns False once the connection is closed: the worker has nothing left to do.
        """
        try:
            version = self.db.data_version()
            if version == self._data_version:
                return True
            self._data_version = version
            snap = self._load(self._done_seq)
        except StoreError as exc:
            if self.db.closed:
                return False
            # Unreachable: the outage watch says so; the store's own reads are told apart.
            if not isinstance(exc, DatabaseUnreachable) and self._complaints.due("foreign"):
                logger.warning("could not look for changes by other processes: %s", exc)
            return True
        token = self._token
        if token is not None:
            _soon(token, self._apply, snap)
        return True

    def _load(self, seq: int) -> _Snapshot:
        db = self.db
        return _Snapshot(
            seq=seq,
            trust=dict(db.trust_list()),
            chats={c.chat_id: c for c in db.chat_configs()},
            runtime=db.runtime_config(),
            user_modes={(u.chat_id, u.user_id): u for u in db.user_attentions()},
        )

    def _apply(self, snap: _Snapshot) -> None:
        """Take a reloaded snapshot, then redo this process's writes it does not hold yet."""
        self._pending = [(seq, change) for seq, change in self._pending if seq > snap.seq]
        before = self._runtime
        self._trust = dict(snap.trust)
        self._chats = dict(snap.chats)
        self._runtime = dict(snap.runtime)
        self._user_modes = dict(snap.user_modes)
        for _, change in self._pending:
            change()
        if self._runtime != before:
            self.config_version += 1

    # ---- trust list (read model) ------------------------------------------------------------

    def get_tier(self, user_id: int) -> str | None:
        """The user's trust tier, or None when not on the list."""
        return self._trust.get(user_id)

    def trust_list(self) -> list[tuple[int, str]]:
        """Every (user_id, tier) on the trust list, by user id."""
        return sorted(self._trust.items())

    def set_tier(self, user_id: int, tier: str) -> None:
        """Add the user to the trust list, or change their tier (await `flush` for durability)."""
        if tier not in TRUST_TIERS:
            raise ValueError(f"tier must be one of {', '.join(TRUST_TIERS)}, got {tier!r}")

        def change() -> None:
            self._trust[user_id] = tier

        self._model_write(change, "set_tier", user_id, tier)

    def remove_trust(self, user_id: int) -> bool:
        """Remove the user from the trust list; False when they were not on it."""
        if user_id not in self._trust:
            return False

        def change() -> None:
            self._trust.pop(user_id, None)

        self._model_write(change, "remove_trust", user_id)
        return True

    # ---- runtime config (read model) --------------------------------------------------------

    def runtime_config(self) -> dict[str, str]:
        """Every runtime config override: dotted key -> text value."""
        return dict(self._runtime)

    def set_runtime_config(self, key: str, value: str) -> None:
        """Store one runtime override (already validated by the caller)."""

        def change() -> None:
            if self._runtime.get(key) != value:
                self._runtime[key] = value
                self.config_version += 1

        self._model_write(change, "set_runtime_config", key, value)

    def delete_runtime_config(self, key: str) -> bool:
        """Drop one runtime override, so the file's value applies again."""
        if key not in self._runtime:
            return False

        def change() -> None:
            if self._runtime.pop(key, None) is not None:
                self.config_version += 1

        self._model_write(change, "delete_runtime_config", key)
        return True

    # ---- chat config (read model) -----------------------------------------------------------

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        """The chat's own settings, or None when it uses the defaults."""
        return self._chats.get(chat_id)

    def chat_configs(self) -> list[ChatConfig]:
        """Every chat with its own settings, by chat id."""
        return [self._chats[k] for k in sorted(self._chats)]

    def set_attention_mode(self, chat_id: int, mode: str, now: float) -> None:
        """Set the chat's attention mode, keeping its other settings."""
        from picortex.config import ATTENTION_MODES

        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")

        def change() -> None:
            old = self._chats.get(chat_id)
            self._chats[chat_id] = (
                ChatConfig(chat_id, mode, None, None, now)
                if old is None
                else attrs.evolve(old, attention_mode=mode, updated_at=now)
            )

        self._model_write(change, "set_attention_mode", chat_id, mode, now)

    def set_discriminator(
        self, chat_id: int, model: str | None, threshold: float | None, now: float
    ) -> None:
        """Set the chat's own discriminator model and confidence threshold (None: the
        default), keeping its mode."""
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError("discriminator_threshold must be from 0 to 1")

        def change() -> None:
            old = self._chats.get(chat_id)
            self._chats[chat_id] = (
                ChatConfig(chat_id, None, model, threshold, now)
                if old is None
                else attrs.evolve(
                    old,
                    discriminator_model=model,
                    discriminator_threshold=threshold,
                    updated_at=now,
                )
            )

        self._model_write(change, "set_discriminator", chat_id, model, threshold, now)

    def delete_chat_config(self, chat_id: int) -> bool:
        """Forget the chat's own settings, so the defaults apply again."""
        if chat_id not in self._chats:
            return False

        def change() -> None:
            self._chats.pop(chat_id, None)

        self._model_write(change, "delete_chat_config", chat_id)
        return True

    # ---- per-user attention (read model) ----------------------------------------------------

    def get_user_attention(self, chat_id: int, user_id: int) -> str | None:
        """The user's own attention mode in the chat, or None when the chat's mode applies."""
        if not self._user_modes:  # the common case: no overrides anywhere, no tuple built
            return None
        row = self._user_modes.get((chat_id, user_id))
        return row.mode if row is not None else None

    def user_attentions(self) -> list[UserAttention]:
        """Every per-user attention override, by chat then user. Scope: global."""
        return [self._user_modes[k] for k in sorted(self._user_modes)]

    def set_user_attention(self, chat_id: int, user_id: int, mode: str, now: float) -> None:
        """Set the user's own attention mode in the chat."""
        from picortex.config import ATTENTION_MODES

        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {', '.join(ATTENTION_MODES)}")

        def change() -> None:
            self._user_modes[(chat_id, user_id)] = UserAttention(chat_id, user_id, mode, now)

        self._model_write(change, "set_user_attention", chat_id, user_id, mode, now)

    def delete_user_attention(self, chat_id: int, user_id: int) -> bool:
        """Drop the user's own mode in the chat; False when they had none."""
        if (chat_id, user_id) not in self._user_modes:
            return False

        def change() -> None:
            self._user_modes.pop((chat_id, user_id), None)

        self._model_write(change, "delete_user_attention", chat_id, user_id)
        return True

    # ---- handled message ids ------------------------------------------------------------------

    def seen(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool | None:
        """True when handled before, False when surely not, None when only the database
        knows. With the message's guild (None: a DM) its shard's floor applies, else the
        highest."""
        seen = self._seen
        if message_id in seen:
            return True
        if message_id > seen.top or message_id > seen.floor_of(guild_id):
            return False
        return None

    def is_seen(self, message_id: int) -> bool:
        """Whether the message id was handled (from memory; an old id counts as handled)."""
        return self.seen(message_id) is not False

    async def was_handled(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool:
        """Whether the message id was handled before, asking the database only for an old
        id."""
        known = self.seen(message_id, guild_id)
        if known is not None:
            return known
        try:
            return await self.read(lambda db: db.is_seen(message_id))
        except DatabaseUnreachable:
            return True  # while only the database knows, an old id is never answered twice

    def note_seen(self, message_id: int) -> None:
        """Remember an id in memory only (chatter: a replay of it costs nothing either way)."""
        self._seen.add(message_id)

    def mark_handled(
        self, message_id: int, at: float | None = None, guild_id: int | None = None
    ) -> None:
        """Remember that a message (of `guild_id`; None: a DM) was handled: at once in
        memory, persisted in the next group."""
        self._seen.add(message_id)
        self._put(_Op(_SEEN, row=(message_id, time.time() if at is None else at, guild_id)))

    async def adopt_shard(self, shard: tuple[int, int]) -> None:
        """Take a shard over from another process (SPEC 17): its ids handled in the last
        ADOPT_SECONDS are known from now on, and older ones of it are asked of the database,
        so none is answered twice. After every write queued before it."""
        first = snowflake_at(time.time() - ADOPT_SECONDS)
        ids = await self.read(lambda db: db.shard_seen_since(shard, first))
        self._seen.adopt(shard, ids, first - 1)

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None:
        """Queue noting that the channel had a message handled (catch-up looks there)."""
        self._submit_named("note_channel_activity", channel_id, guild_id, last_handled_id, at)

    async def active_channels(
        self, since: float, limit: int, shards: Sequence[Shard] | None = None
    ) -> list[tuple[int, int | None, int]]:
        """Channels active since `since`, newest first, of `shards` (default: those this
        process serves; see Store.active_channels)."""
        scope = self.shards if shards is None else tuple(shards)
        return await self.read(lambda db: db.active_channels(since, limit, scope))

    # ---- memory, errors, spend: queued writes --------------------------------------------------

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
        """Queue a message for recall; storing it again updates an edited text."""
        self._submit_named(
            "add_memory_message",
            message_id,
            channel_id,
            guild_id,
            author_id,
            author_name,
            content,
            created_at,
        )

    def delete_memory_message(self, message_id: int) -> None:
        """Queue forgetting a message (deleted on Discord)."""
        self._submit_named("delete_memory_message", message_id)

    def forget_messages(self, message_ids: Iterable[int]) -> None:
        """Queue forgetting deleted messages and every observation made of them."""
        self._submit_named("forget_messages", list(message_ids))

    def forget_channel(self, channel_id: int, chat_home: Path | None = None) -> None:
        """Queue forgetting a deleted channel's messages, observations, activity and chat home.

        Discord never reuses an id, so nothing would ever read that chat home again.
        """

        self._submit_named("forget_channel_memory", channel_id)
        if chat_home is not None:
            # After the database's rows, in order; kept by name through an outage like them.
            self._submit_named("forget_chat_home", str(chat_home), channel_id)

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
        pairs = [[persona, trigger] for persona, trigger in observed]
        self._submit_named("reindex_observed", message_id, channel_id, guild_id, content, pairs, at)

    async def search_memory(
        self,
        query: str,
        since: float,
        workspace: str | None,
        limit: int = 10,
        *,
        channel_ids: Iterable[int] | None = None,
    ) -> list[MemoryHit]:
        """Memory matching any word of `query`, best first (see Store.search_memory)."""
        channels = None if channel_ids is None else list(channel_ids)
        return await self.read(
            lambda db: db.search_memory(query, since, workspace, limit, channel_ids=channels)
        )

    # ---- the panel's reads and rare writes -------------------------------------------------
    # These run on the caller's thread (the panel's requests, never the message path). The
    # reads go through the read connection; the one write takes the writer's lock.

    def invocation_errors(self, unresolved_only: bool = False) -> list[InvocationError]:
        """Invocation errors, oldest first (see Store.invocation_errors)."""
        return self._reads().invocation_errors(unresolved_only)

    def invocation_error(self, error_id: int) -> InvocationError | None:
        """One invocation error by id, or None."""
        return self._reads().invocation_error(error_id)

    def unresolved_errors_since(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of recent unresolved errors (the panel's read)."""
        return self._reads().unresolved_errors_since(since)

    async def recent_unresolved_errors(self, since: float) -> list[tuple[str, str, float]]:
        """`unresolved_errors_since` on the store thread, for the message path."""
        return await self.read(lambda db: db.unresolved_errors_since(since))

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
        """Queue an error row; `on_committed(row_id)` runs on the event loop once committed."""

        def done(row_id: object) -> None:
            if on_committed is not None:
                on_committed(cast(int, row_id))

        self._submit_named(
            "add_invocation_error",
            workspace_id,
            persona,
            signal_id,
            stage,
            error_message,
            stack_trace,
            created_at,
            on_done=None if on_committed is None else done,
        )

    def resolve_invocation_error(self, error_id: int, resolution: str, resolved_at: float) -> bool:
        """Mark an error resolved; False when no error has that id."""
        return self.db.resolve_invocation_error(error_id, resolution, resolved_at)

    def daily_spend(self, since: float) -> list[tuple[str, str, float]]:
        """USD spent per workspace per UTC day since `since` (see Store.daily_spend)."""
        return self._reads().daily_spend(since)

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
        self._submit_named(
            "add_observation",
            persona,
            message_id,
            channel_id,
            guild_id,
            trigger,
            content,
            created_at,
            author_id,
        )

    def add_spend(
        self,
        workspace: str,
        period_key: str,
        cost_usd: float,
        at: float,
        *,
        user_id: int | None = None,
    ) -> None:
        """Queue the cost of one model call against a workspace and period (and its user)."""
        if not cost_usd >= 0:
            raise ValueError(f"cost_usd must be 0 or more, got {cost_usd!r}")
        self._submit_named("add_spend", workspace, period_key, cost_usd, at, user_id=user_id)
        try:
            totals = self._period_spend(period_key)
        except DatabaseUnreachable:
            totals = {}  # a new period met while unreachable: read, with this row, once back
        totals[workspace] = totals.get(workspace, 0.0) + cost_usd
        if user_id is not None:
            for since, users in self._user_spend.items():
                if at >= since:
                    users[user_id] = users.get(user_id, 0.0) + cost_usd

    def user_spend(self, user_id: int, since: float) -> float:
        """USD spent on calls made for the user since `since` (a day's start), from memory."""
        return self.spend_by_user(since).get(user_id, 0.0)

    def spend_by_user(self, since: float) -> dict[int, float]:
        """USD spent since `since` (a day's start), per user, from memory."""
        users = self._user_spend.get(since)
        if users is None:
            # Once a day, before any of its spend was queued here.
            users = self._user_spend[since] = self.db.spend_by_user(since)
            while len(self._user_spend) > SPEND_PERIODS:
                del self._user_spend[next(iter(self._user_spend))]
        return dict(users)

    def spend(self, workspace: str, period_key: str) -> float:
        """USD spent by the workspace in the period, from memory."""
        return self._period_spend(period_key).get(workspace, 0.0)

    def spend_by_workspace(self, period_key: str) -> dict[str, float]:
        """USD spent in the period, per workspace that spent anything, from memory."""
        totals = self._period_spend(period_key)
        return {w: totals[w] for w in sorted(totals)}

    def _period_spend(self, period_key: str) -> dict[str, float]:
        """The period's totals: read from SQLite once per period, then kept by `add_spend`."""
        totals = self._spend.get(period_key)
        if totals is None:
            # Once a period (a day or a month), before any of its spend was queued here.
            totals = self._spend[period_key] = self.db.spend_by_workspace(period_key)
            while len(self._spend) > SPEND_PERIODS:
                del self._spend[next(iter(self._spend))]
        return totals

    # ---- gateway session and command tree -------------------------------------------------

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        """The shard's persisted session as committed (read at start, before a RESUME)."""
        return self._reads().gateway_session(shard)

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None:
        """Queue persisting the shard's session so a restarted process can RESUME it."""
        self._submit_named("save_gateway_session", shard, session_id, url, seq, at)

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        """Queue forgetting the shard's session (a clean shutdown, or Discord invalidated it)."""
        self._submit_named("clear_gateway_session", shard)

    async def app_commands_hash(self, scope: str) -> str | None:
        """The digest of the command tree last registered in `scope` (SPEC 15)."""
        return await self.read(lambda db: db.app_commands_hash(scope))

    def set_app_commands_hash(self, scope: str, digest: str, now: float) -> None:
        """Queue remembering that the tree with `digest` is registered in `scope`."""
        self._submit_named("set_app_commands_hash", scope, digest, now)

    # ---- pruning: on the store's own thread, in its order, so a long delete never stalls
    # the bot. Scope: global (a cluster prunes once, not once per node).

    async def prune_memory(self, older_than: float) -> int:
        """Forget messages and observations older than `older_than`; how many went."""
        return await self.call(lambda db: db.prune_memory(older_than))

    async def prune_resolved_errors(self, resolved_before: float) -> int:
        """Forget errors resolved before `resolved_before`; unresolved ones stay."""
        return await self.call(lambda db: db.prune_resolved_errors(resolved_before))

    async def prune_seen(self, older_than: float) -> int:
        """Forget handled ids seen before `older_than`; how many went."""
        return await self.call(lambda db: db.prune_seen(older_than))

    async def cap_unresolved_errors(self, keep: int) -> int:
        """Keep the newest `keep` unresolved errors; how many older ones went."""
        return await self.call(lambda db: db.cap_unresolved_errors(keep))

    async def roll_up_ledger(self, before: float) -> int:
        """Turn ledger rows older than `before` into daily totals; how many rows went."""
        return await self.call(lambda db: db.roll_up_ledger(before))

    async def forget_user(self, user_id: int) -> tuple[int, int]:
        """Delete what `user_id` said: (messages, observations) deleted, in one transaction."""
        return await self.call(lambda db: db.forget_user(user_id))


def _nothing(db: Database) -> None:
    return None


def _forget_channel_memory(db: Database, channel_id: int) -> None:
    """A deleted channel's messages, observations and activity, forgotten in one step."""
    db.forget_channel(channel_id)
    db.forget_channel_activity(channel_id)


def _reindex_observed(
    db: Database,
    message_id: int,
    channel_id: int,
    guild_id: int | None,
    content: str,
    observed: Sequence[Sequence[str]],
    at: float,
) -> bool:
    """An edit applied: the message's text, and each [persona, trigger] observation again.

    One step on the store's thread: no reader ever sees the old observations gone and the
    new ones not yet there."""
    author = db.reindex_memory_message(message_id, content)
    if author is not None:
        for persona, trigger in observed:
            db.add_observation(
                persona, message_id, channel_id, guild_id, trigger, content, at, author
            )
    return author is not None


def _forget_chat_home(db: Database, chat_home: str, channel_id: int) -> bool:
    """A deleted channel's chat home folder. Not a database write, but made in the writes'
    order and kept by name with them: a stop during an outage does not leave it behind."""
    return ChatHome(Path(chat_home), str(channel_id)).remove()


# Writes of several Database methods in one step (or none), kept by name like the others.
_COMPOSITE_WRITES: Final[dict[str, Callable[..., object]]] = {
    "forget_channel_memory": _forget_channel_memory,
    "reindex_observed": _reindex_observed,
    "forget_chat_home": _forget_chat_home,
}


# Writes a read model mirrors: the store's own methods of these names take the same
# arguments as the Database's and change the model too.
MODEL_WRITES: Final = frozenset(
    {
        "set_tier",
        "remove_trust",
        "set_runtime_config",
        "delete_runtime_config",
        "set_attention_mode",
        "set_discriminator",
        "delete_chat_config",
        "set_user_attention",
        "delete_user_attention",
    }
)
# The writes a store may keep by name (`_Op.named`) and do again at its next start: nothing
# else is ever called from a kept file.
NAMED_WRITES: Final = MODEL_WRITES | {
    "note_channel_activity",
    "add_memory_message",
    "delete_memory_message",
    "forget_messages",
    "add_invocation_error",
    "add_observation",
    "add_spend",
    "save_gateway_session",
    "clear_gateway_session",
    "set_app_commands_hash",
    *_COMPOSITE_WRITES,
}


def _plain_seen(row: list[object]) -> bool:
    """Whether a kept handled mark is (message id, when, guild id or None)."""
    message_id, at, guild_id = row
    return (
        type(message_id) is int
        and isinstance(at, int | float)
        and (guild_id is None or type(guild_id) is int)
    )


def _named(
    name: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> Callable[[Database], object]:
    """Database method `name` (or a composite write of several) called with `args` and
    `kwargs`."""
    assert name in NAMED_WRITES, name
    composite = _COMPOSITE_WRITES.get(name)

    def write(db: Database) -> object:
        if composite is not None:
            return composite(db, *args, **kwargs)
        return getattr(db, name)(*args, **kwargs)

    return write


def _soon(token: trio.lowlevel.TrioToken, fn: Callable[..., object], *args: object) -> None:
    """Run `fn(*args)` on the event loop (from the worker thread); dropped once it ended."""
    with contextlib.suppress(trio.RunFinishedError):
        token.run_sync_soon(fn, *args)
