"""The store's contract: what every backend's named queries promise, written only against
`StoreQueries` and `AdminQueries`, so another backend runs the same tests.

A backend is added to BACKENDS: it opens the bot's store (`running`) and the store a command
run outside the bot uses (`admin`), both on the same database, and can open them again to
show what was made durable.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs
import pytest
import trio

from picortex.store import AdminQueries, AdminStore, Store, StoreActor, StoreQueries
from picortex.store import actor as actor_mod
from picortex.store.shards import ADOPT_SECONDS
from picortex.types import snowflake_at

if TYPE_CHECKING:
    from picortex.store.pg.database import PgDatabase
else:
    PgDatabase = None  # imported by the PostgreSQL backend only, which psycopg needs


def _pg() -> type[PgDatabase]:
    from picortex.store.pg.database import PgDatabase

    return PgDatabase


DAY = 86_400.0
NOW = 2_000_000_000.0


class Backend(Protocol):
    """One database, opened as often as a test needs."""

    def running(
        self, shards: Sequence[tuple[int, int]] = ((0, 1),)
    ) -> AbstractAsyncContextManager[StoreQueries]:
        """The bot's store of a process serving `shards`, running for the block."""
        ...

    def admin(self) -> AdminQueries:
        """The store a command run outside the bot opens (the caller closes it)."""
        ...


@attrs.frozen
class SQLite:
    """The embedded default: the store actor, and AdminStore for commands."""

    path: Path

    @asynccontextmanager
    async def running(
        self, shards: Sequence[tuple[int, int]] = ((0, 1),)
    ) -> AsyncIterator[StoreQueries]:
        actor = StoreActor(Store.open(self.path), shards=shards)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(actor.run)
                yield actor
                nursery.cancel_scope.cancel()
        finally:
            actor.close()

    def admin(self) -> AdminQueries:
        return AdminStore.open(self.path)


@attrs.frozen
class PostgreSQL:
    """The cluster's backend: the same store actor and AdminStore over PostgreSQL."""

    url: str

    @asynccontextmanager
    async def running(
        self, shards: Sequence[tuple[int, int]] = ((0, 1),)
    ) -> AsyncIterator[StoreQueries]:
        actor = StoreActor(_pg().open(self.url), shards=shards)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(actor.run)
                yield actor
                nursery.cancel_scope.cancel()
        finally:
            actor.close()

    def admin(self) -> AdminQueries:
        return AdminStore(_pg().open(self.url))


def _postgresql(request: pytest.FixtureRequest, tmp: Path) -> Backend:
    from tests.pg import Server

    server: Server = request.getfixturevalue("pg_server")
    return PostgreSQL(server.database())


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "sqlite": lambda request, tmp: SQLite(tmp / "picortex.db"),
    "postgresql": _postgresql,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StoreQueries]:
    async with backend.running() as running:
        yield running


@asynccontextmanager
async def _admin_of(backend: Backend, kind: str) -> AsyncIterator[AdminQueries]:
    if kind == "bot":
        async with backend.running() as running:
            yield running
        return
    admin = backend.admin()
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture(params=["bot", "command"])
async def admin(request: pytest.FixtureRequest, backend: Backend) -> AsyncIterator[AdminQueries]:
    """The admin queries, as the running bot's store and as a command's."""
    async with _admin_of(backend, request.param) as opened:
        yield opened


@pytest.fixture
def reopen(backend: Backend) -> Iterator[Callable[[], AdminQueries]]:
    """A second, later view of the same database (what a restart or another process sees)."""
    opened: list[AdminQueries] = []

    def again() -> AdminQueries:
        view = backend.admin()
        opened.append(view)
        return view

    yield again
    for view in opened:
        view.close()


# ---- trust, runtime config, chat config: both kinds of store --------------------------------


async def test_trust_list_changes_read_back_and_are_durable(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    admin.set_tier(7, "trusted")
    admin.set_tier(3, "user")
    admin.set_tier(7, "admin")  # a second set changes the tier
    assert admin.get_tier(7) == "admin"
    assert admin.trust_list() == [(3, "user"), (7, "admin")]
    assert admin.remove_trust(3) is True
    assert admin.remove_trust(3) is False
    assert admin.get_tier(3) is None
    with pytest.raises(ValueError, match="tier must be one of"):
        admin.set_tier(9, "owner")
    await admin.flush()
    assert reopen().trust_list() == [(7, "admin")]


async def test_runtime_config_overrides_read_back_and_are_durable(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    before = admin.config_version
    admin.set_runtime_config("attention.mode", "always")
    admin.set_runtime_config("budget.ceiling_usd", "5")
    await admin.flush()
    assert admin.config_version != before
    assert admin.runtime_config() == {"attention.mode": "always", "budget.ceiling_usd": "5"}
    assert admin.delete_runtime_config("budget.ceiling_usd") is True
    assert admin.delete_runtime_config("budget.ceiling_usd") is False
    await admin.flush()
    assert reopen().runtime_config() == {"attention.mode": "always"}


async def test_a_chat_keeps_its_own_attention_mode_until_forgotten(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    assert admin.get_chat_config(5) is None
    admin.set_attention_mode(5, "always", NOW)
    admin.set_attention_mode(4, "mentions-only", NOW)
    admin.set_attention_mode(5, "mentions-only", NOW + 1)
    own = admin.get_chat_config(5)
    assert own is not None and (own.attention_mode, own.updated_at) == ("mentions-only", NOW + 1)
    assert [c.chat_id for c in admin.chat_configs()] == [4, 5]
    with pytest.raises(ValueError, match="attention mode must be one of"):
        admin.set_attention_mode(5, "sometimes", NOW)
    assert admin.delete_chat_config(4) is True
    assert admin.delete_chat_config(4) is False
    await admin.flush()
    assert [(c.chat_id, c.attention_mode) for c in reopen().chat_configs()] == [
        (5, "mentions-only")
    ]


async def test_a_users_own_attention_mode_is_kept_per_chat_until_dropped(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    assert admin.get_user_attention(5, 7) is None
    admin.set_user_attention(5, 7, "always", NOW)
    admin.set_user_attention(5, 8, "silent", NOW)
    admin.set_user_attention(4, 7, "silent", NOW)
    admin.set_user_attention(5, 7, "silent", NOW + 1)  # a second set changes the mode
    assert admin.get_user_attention(5, 7) == "silent"
    assert admin.get_user_attention(6, 7) is None  # another chat keeps the chat's mode
    assert [(u.chat_id, u.user_id, u.mode) for u in admin.user_attentions()] == [
        (4, 7, "silent"),
        (5, 7, "silent"),
        (5, 8, "silent"),
    ]
    with pytest.raises(ValueError, match="attention mode must be one of"):
        admin.set_user_attention(5, 7, "sometimes", NOW)
    assert admin.delete_user_attention(5, 8) is True
    assert admin.delete_user_attention(5, 8) is False
    await admin.flush()
    rows = reopen().user_attentions()
    assert [(u.chat_id, u.user_id, u.mode, u.updated_at) for u in rows] == [
        (4, 7, "silent", NOW),
        (5, 7, "silent", NOW + 1),
    ]


async def test_the_bot_reads_stored_user_attention_from_memory_at_start(backend: Backend) -> None:
    command = backend.admin()
    try:
        command.set_user_attention(5, 7, "always", NOW)
        await command.flush()
    finally:
        command.close()
    async with backend.running() as running:
        assert running.get_user_attention(5, 7) == "always"
        assert running.get_user_attention(5, 8) is None


async def test_a_chat_keeps_its_own_discriminator_model_and_threshold(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    admin.set_discriminator(5, "claude-haiku-9", 0.7, NOW)  # a chat with no mode of its own
    own = admin.get_chat_config(5)
    assert own is not None
    assert (own.attention_mode, own.discriminator_model, own.discriminator_threshold) == (
        None,
        "claude-haiku-9",
        0.7,
    )
    admin.set_attention_mode(5, "discriminate", NOW + 1)
    admin.set_discriminator(5, None, 0.25, NOW + 2)
    with pytest.raises(ValueError, match="from 0 to 1"):
        admin.set_discriminator(5, None, 1.5, NOW)
    await admin.flush()
    again = reopen().get_chat_config(5)
    assert again is not None
    assert (again.attention_mode, again.discriminator_model, again.discriminator_threshold) == (
        "discriminate",
        None,
        0.25,
    )


async def test_spend_adds_up_per_workspace_user_and_day(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    admin.add_spend("1", "2033-05", 0.25, NOW, user_id=9)
    admin.add_spend("1", "2033-05", 0.5, NOW + 1)
    admin.add_spend("dm", "2033-05", 1.0, NOW - DAY, user_id=9)
    admin.add_spend("1", "2033-04", 4.0, NOW - 40 * DAY)
    with pytest.raises(ValueError, match="cost_usd"):
        admin.add_spend("1", "2033-05", -1.0, NOW)
    assert admin.spend("1", "2033-05") == pytest.approx(0.75)
    assert admin.spend("2", "2033-05") == 0.0
    assert admin.spend_by_workspace("2033-05") == pytest.approx({"1": 0.75, "dm": 1.0})
    await admin.flush()
    assert admin.user_spend(9, NOW - 0.5) == pytest.approx(0.25)
    assert admin.spend_by_user(NOW - 2 * DAY) == pytest.approx({9: 1.25})
    later = reopen()
    assert later.spend_by_workspace("2033-05") == pytest.approx({"1": 0.75, "dm": 1.0})
    days = later.daily_spend(NOW - 2 * DAY)
    assert [(w, day) for w, day, _ in days] == [("dm", "2033-05-17"), ("1", "2033-05-18")]
    assert [usd for _, _, usd in days] == pytest.approx([1.0, 0.75])


async def test_a_flush_makes_every_write_durable(
    admin: AdminQueries, reopen: Callable[[], AdminQueries]
) -> None:
    for user in range(1, 51):
        admin.set_tier(user, "user")
    await admin.flush()
    assert len(reopen().trust_list()) == 50


# ---- the bot's store --------------------------------------------------------------------------


async def test_an_error_row_is_named_once_committed_and_resolved_by_a_command(
    store: StoreQueries, reopen: Callable[[], AdminQueries]
) -> None:
    committed: list[int] = []
    store.add_invocation_error(
        "1", "sleep", "55", "generate", "boom", "trace", NOW, on_committed=committed.append
    )
    store.add_invocation_error("dm", "default", "", "post", "gone", None, NOW + 1)
    await store.flush()
    assert len(committed) == 1
    (row_id,) = committed
    row = store.invocation_error(row_id)
    assert row is not None
    assert (row.workspace_id, row.persona, row.signal_id, row.stage) == (
        "1",
        "sleep",
        "55",
        "generate",
    )
    assert (row.error_message, row.stack_trace, row.resolved_at) == ("boom", "trace", None)
    assert [e.error_message for e in store.invocation_errors()] == ["boom", "gone"]
    command = reopen()
    assert command.resolve_invocation_error(row_id, "fixed", NOW + 2) is True
    assert command.resolve_invocation_error(10_000, "fixed", NOW + 2) is False
    with pytest.raises(ValueError, match="resolution must be one of"):
        command.resolve_invocation_error(row_id, "forgotten", NOW + 2)
    assert [e.error_message for e in store.invocation_errors(unresolved_only=True)] == ["gone"]
    resolved = store.invocation_error(row_id)
    assert resolved is not None and (resolved.resolution, resolved.resolved_at) == (
        "fixed",
        NOW + 2,
    )


async def test_recent_unresolved_errors_are_what_composting_counts(
    store: StoreQueries, reopen: Callable[[], AdminQueries]
) -> None:
    store.add_invocation_error("1", "sleep", "1", "generate", "old", None, NOW - 10)
    store.add_invocation_error("1", "sleep", "2", "post", "new", None, NOW + 1)
    store.add_invocation_error("dm", "default", "3", "tiebreak", "newer", None, NOW + 2)
    store.add_invocation_error("dm", "default", "4", "generate", "fixed", None, NOW + 3)
    # Queued, not yet committed: the message path's read still sees all of them.
    found = await store.recent_unresolved_errors(NOW)
    assert found == [
        ("sleep", "post", NOW + 1),
        ("default", "tiebreak", NOW + 2),
        ("default", "generate", NOW + 3),
    ]
    fixed = store.invocation_errors()[-1].id
    command = reopen()
    assert command.resolve_invocation_error(fixed, "fixed", NOW + 4)
    expected = [("sleep", "post", NOW + 1), ("default", "tiebreak", NOW + 2)]
    assert command.unresolved_errors_since(NOW) == expected
    assert store.unresolved_errors_since(NOW) == expected
    assert await store.recent_unresolved_errors(NOW) == expected


async def test_handled_ids_are_known_at_once_and_after_a_restart(backend: Backend) -> None:
    async with backend.running() as store:
        assert store.seen(100) is False
        store.mark_handled(100, NOW)
        store.note_seen(200)  # chatter: memory only
        assert store.seen(100) is True and store.seen(200) is True
        assert await store.was_handled(100)
        assert store.seen(101) is False
    async with backend.running() as store:
        assert store.seen(100) is True
        assert await store.was_handled(100)
        assert not await store.was_handled(200)


async def test_active_channels_are_newest_first_since_a_time(store: StoreQueries) -> None:
    store.note_channel_activity(10, 1, 100, NOW - 10)
    store.note_channel_activity(11, None, 110, NOW - 5)
    store.note_channel_activity(10, None, 90, NOW)  # an older id never moves it back
    store.note_channel_activity(12, 1, 120, NOW - DAY)
    assert await store.active_channels(NOW - 60, 10) == [(10, 1, 100), (11, None, 110)]
    assert await store.active_channels(NOW - 60, 1) == [(10, 1, 100)]


def _guild_on(shard: int, count: int = 2) -> int:
    """A guild id Discord routes to shard `shard` of `count`."""
    return (1000 * count + shard) << 22 | 7


async def test_active_channels_are_those_of_the_shards_asked(backend: Backend) -> None:
    g0, g1 = _guild_on(0), _guild_on(1)
    everything = [(12, None, 120), (11, g1, 110), (10, g0, 100)]
    async with backend.running() as store:
        store.note_channel_activity(10, g0, 100, NOW - 10)
        store.note_channel_activity(11, g1, 110, NOW - 5)
        store.note_channel_activity(12, None, 120, NOW - 3)  # a DM: shard 0
        assert await store.active_channels(NOW - 60, 10) == everything
        assert await store.active_channels(NOW - 60, 10, [(1, 2)]) == [(11, g1, 110)]
        assert await store.active_channels(NOW - 60, 10, [(0, 2)]) == [
            (12, None, 120),
            (10, g0, 100),
        ]
        assert await store.active_channels(NOW - 60, 10, [(0, 2), (1, 2)]) == everything
        assert await store.active_channels(NOW - 60, 1, [(0, 2)]) == [(12, None, 120)]
        assert await store.active_channels(NOW - 60, 10, []) == []
    async with backend.running(shards=[(1, 2)]) as serving_one:
        # By default: the shards the process serves.
        assert await serving_one.active_channels(NOW - 60, 10) == [(11, g1, 110)]


async def test_a_process_keeps_the_newest_handled_ids_of_its_own_shards(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    g0, g1 = _guild_on(0), _guild_on(1)
    async with backend.running() as store:
        # Shard 0's and shard 1's messages, in time order.
        store.mark_handled(1001, NOW, g0)
        store.mark_handled(1002, NOW, g1)
        store.mark_handled(1003, NOW, g0)
        store.mark_handled(1004, NOW, g1)
    monkeypatch.setattr(actor_mod, "SEEN_MEMORY", 1)
    async with backend.running(shards=[(0, 2)]) as store:
        # Each mark kept its guild: memory holds the newest of this process's shard, not
        # shard 1's newer one ...
        assert store.seen(1003, g0) is True
        # ... and below it only the database knows.
        assert store.seen(1001, g0) is None
        assert await store.was_handled(1001, g0)
        assert not await store.was_handled(1000, g0)


async def test_a_shard_taken_over_brings_its_recent_handled_ids_and_a_floor_of_its_own(
    backend: Backend,
) -> None:
    g0, g1 = _guild_on(0), _guild_on(1)
    now = time.time()
    recent = snowflake_at(now - 60)
    old = snowflake_at(now - 2 * ADOPT_SECONDS)  # before the marks a takeover loads
    async with (
        backend.running(shards=[(0, 2)]) as mine,
        backend.running(shards=[(1, 2)]) as other,
    ):
        # Another process serves shard 1 and handles its messages after this one started.
        other.mark_handled(old + 1, now - 2 * ADOPT_SECONDS, g1)
        other.mark_handled(recent + 1, now, g1)
        mine.mark_handled(old + 3, now - 2 * ADOPT_SECONDS, g0)
        await other.flush()
        await mine.flush()
        await mine.adopt_shard((1, 2))
        # Taken over: shard 1's recent handled ids are known at once, and above its floor
        # an id not handled is surely new ...
        assert mine.seen(recent + 1, g1) is True
        assert mine.seen(recent + 2, g1) is False
        # ... below it, neither handled nor new: the database is asked.
        assert mine.seen(old + 1, g1) is None
        assert await mine.was_handled(old + 1, g1)
        assert mine.seen(old + 2, g1) is None
        assert not await mine.was_handled(old + 2, g1)
        # Shard 0 keeps its own floor: an old id of it is still known either way.
        assert mine.seen(old + 3, g0) is True
        assert mine.seen(old + 4, g0) is False
        # Said without its guild, an id gets the highest floor of all.
        assert mine.seen(old + 4) is None
        # A DM is of shard 0.
        assert mine.seen(old + 4, None) is False


def _remember(store: StoreQueries, message_id: int, channel_id: int, text: str) -> None:
    store.add_memory_message(message_id, channel_id, 1, 9, "alice", text, NOW)


async def test_memory_is_searched_by_word_workspace_channel_and_time(store: StoreQueries) -> None:
    _remember(store, 1, 10, "the insomnia came back")
    store.add_memory_message(2, 20, None, 9, "alice", "insomnia in a dm", NOW)
    store.add_memory_message(3, 10, 1, 9, "alice", "old insomnia", NOW - 30 * DAY)
    store.add_observation("sleep", 1, 10, 1, "insomnia", "the insomnia came back", NOW, author_id=9)
    hits = await store.search_memory("INSOMNIA?", NOW - DAY, "1")
    assert sorted((h.kind, h.message_id) for h in hits) == [("message", 1), ("observation", 1)]
    message = next(h for h in hits if h.kind == "message")
    assert (message.author_name, message.author_id, message.channel_id) == ("alice", 9, 10)
    observation = next(h for h in hits if h.kind == "observation")
    assert (observation.persona, observation.trigger) == ("sleep", "insomnia")
    assert [h.message_id for h in await store.search_memory("insomnia", 0.0, "dm")] == [2]
    assert {h.message_id for h in await store.search_memory("insomnia", 0.0, None)} == {1, 2, 3}
    in_20 = await store.search_memory("insomnia", 0.0, None, channel_ids=[20])
    assert [h.message_id for h in in_20] == [2]
    assert await store.search_memory("insomnia", 0.0, None, limit=1) != []
    assert await store.search_memory("?!", 0.0, None) == []
    assert await store.search_memory('"OR NEAR(', 0.0, None) == []


async def test_an_edit_replaces_the_text_and_its_observations(store: StoreQueries) -> None:
    _remember(store, 1, 10, "insomnia again")
    store.add_observation("sleep", 1, 10, 1, "insomnia", "insomnia again", NOW, author_id=9)
    store.reindex_memory_message(1, 10, 1, "a quiet night", [("calm", "quiet")], NOW + 1)
    assert await store.search_memory("insomnia", 0.0, None) == []
    hits = await store.search_memory("quiet", 0.0, None)
    assert sorted((h.kind, h.content, h.persona) for h in hits) == [
        ("message", "a quiet night", None),
        ("observation", "a quiet night", "calm"),
    ]
    # An edit of a message never stored is not observed either.
    store.reindex_memory_message(2, 10, 1, "quiet too", [("calm", "quiet")], NOW + 1)
    assert {h.message_id for h in await store.search_memory("quiet", 0.0, None)} == {1}


async def test_deleted_messages_and_channels_are_forgotten(store: StoreQueries) -> None:
    for message_id, channel_id in ((1, 10), (2, 10), (3, 20)):
        _remember(store, message_id, channel_id, f"insomnia {message_id}")
        store.add_observation(
            "sleep", message_id, channel_id, 1, "insomnia", "insomnia", NOW, author_id=9
        )
    store.note_channel_activity(20, 1, 3, NOW)
    store.forget_messages([1])
    assert {h.message_id for h in await store.search_memory("insomnia", 0.0, None)} == {2, 3}
    store.forget_channel(20)
    assert {h.message_id for h in await store.search_memory("insomnia", 0.0, None)} == {2}
    assert await store.active_channels(0.0, 10) == []


async def test_a_gateway_session_is_resumed_after_a_restart_until_cleared(
    backend: Backend,
) -> None:
    async with backend.running() as store:
        assert store.gateway_session((0, 1)) is None
        store.save_gateway_session((0, 1), "abc", "wss://resume", 41, NOW)
        store.save_gateway_session((0, 1), "abc", "wss://resume", 42, NOW + 1)
    async with backend.running() as store:
        assert store.gateway_session((0, 1)) == ("abc", "wss://resume", 42)
        assert store.gateway_session((0, 2)) is None  # another shard count: not this session
        store.clear_gateway_session((0, 1))
    async with backend.running() as store:
        assert store.gateway_session((0, 1)) is None


async def test_the_registered_command_tree_is_remembered_per_scope(backend: Backend) -> None:
    async with backend.running() as store:
        assert await store.app_commands_hash("global") is None
        store.set_app_commands_hash("global", "d1", NOW)
        store.set_app_commands_hash("global", "d2", NOW + 1)
        assert await store.app_commands_hash("global") == "d2"  # sees what was queued
        assert await store.app_commands_hash("guild:1") is None
    async with backend.running() as store:
        assert await store.app_commands_hash("global") == "d2"


async def test_the_ledger_rolls_up_by_day_with_the_same_totals(store: StoreQueries) -> None:
    start = 19_000 * DAY  # a UTC day's start
    for day in (start, start + DAY):
        for hour in range(3):  # costs in quarters: sums are exact in any order
            store.add_spend("1", "2022-01", 0.25 * (hour + 1), day + hour * 3600, user_id=7)
    store.add_spend("1", "2022-01", 0.5, start + 2 * DAY, user_id=7)  # after the cut: kept
    await store.flush()
    before = store.daily_spend(0.0)
    assert await store.roll_up_ledger(start + 2 * DAY) == 2 * (3 - 1)
    assert store.daily_spend(0.0) == before
    assert await store.roll_up_ledger(start + 2 * DAY) == 0  # one row per day already


async def test_pruning_drops_only_what_is_old(store: StoreQueries) -> None:
    store.add_memory_message(1, 10, 1, 9, "alice", "insomnia old", NOW - 15 * DAY)
    store.add_memory_message(2, 10, 1, 9, "alice", "insomnia new", NOW - DAY)
    store.add_observation(
        "sleep", 1, 10, 1, "insomnia", "insomnia old", NOW - 15 * DAY, author_id=9
    )
    ids: list[int] = []
    for created in (NOW - 100 * DAY, NOW - 100 * DAY, NOW):
        store.add_invocation_error(
            "1", "p", "", "post", "x", None, created, on_committed=ids.append
        )
    await store.flush()
    assert store.resolve_invocation_error(ids[0], "fixed", NOW - 91 * DAY)
    assert store.resolve_invocation_error(ids[1], "dismissed", NOW - DAY)
    store.mark_handled(100, NOW - 8 * DAY)
    store.mark_handled(101, NOW - 6 * DAY)
    assert await store.prune_memory(NOW - 14 * DAY) == 2  # the message and its observation
    assert await store.prune_resolved_errors(NOW - 90 * DAY) == 1
    assert await store.prune_seen(NOW - 7 * DAY) == 1
    assert {h.message_id for h in await store.search_memory("insomnia", 0.0, None)} == {2}
    assert [e.id for e in store.invocation_errors()] == ids[1:]  # unresolved ones stay
    assert await store.prune_memory(NOW - 14 * DAY) == 0
    assert await store.prune_seen(NOW - 7 * DAY) == 0
