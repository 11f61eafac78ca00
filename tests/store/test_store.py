"""The SQLite store: opening, migrations, transactions and every table's methods."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from picortex.errors import StoreError
from picortex.store import ChatConfig, InvocationError, MemoryHit, Store
from picortex.store.schema import LATEST_VERSION, MIGRATIONS, SCHEMA_VERSION_TABLE


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "picortex.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(db_path) as opened:
        yield opened


# ---- opening and migrations -------------------------------------------------------------


def test_open_creates_the_file_with_wal_and_foreign_keys(store: Store, db_path: Path) -> None:
    assert db_path.is_file()
    assert store.pragma("journal_mode") == "wal"
    assert store.pragma("foreign_keys") == 1
    assert store.pragma("busy_timeout") == 5000
    assert store.schema_version() == LATEST_VERSION
    assert store.pragma("integrity_check") == "ok"


def test_pragma_rejects_anything_but_a_name(store: Store) -> None:
    with pytest.raises(ValueError, match="not a pragma name"):
        store.pragma("journal_mode = DELETE")


def test_reopening_keeps_data_and_runs_no_migration_twice(db_path: Path) -> None:
    with Store.open(db_path) as first:
        first.set_tier(1, "admin")
    for _ in range(3):
        with Store.open(db_path) as again:
            assert again.schema_version() == LATEST_VERSION
            assert again.trust_list() == [(1, "admin")]
    conn = apsw.Connection(str(db_path))
    versions = [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
    conn.close()
    assert versions == list(range(1, LATEST_VERSION + 1))


def test_an_older_database_is_migrated_forward(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = apsw.Connection(str(db_path))
    conn.execute(SCHEMA_VERSION_TABLE)
    conn.execute(MIGRATIONS[0])
    conn.execute("INSERT INTO schema_version (version) VALUES (1)")
    conn.execute("INSERT INTO trust (user_id, tier) VALUES (5, 'user')")
    conn.close()
    with Store.open(db_path) as store:
        assert store.schema_version() == LATEST_VERSION
        assert store.get_tier(5) == "user"
        store.add_memory_message(1, 2, None, 3, "ann", "migrated memory works", 10.0)
        assert [h.message_id for h in store.search_memory("memory", 0.0, None)] == [1]


def test_observations_made_before_authors_were_kept_take_their_message_author(
    db_path: Path,
) -> None:
    db_path.parent.mkdir(parents=True)
    conn = apsw.Connection(str(db_path))
    conn.execute(SCHEMA_VERSION_TABLE)
    for version, migration in enumerate(MIGRATIONS[:5], start=1):
        conn.execute(migration)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    conn.execute(
        "INSERT INTO memory_messages VALUES (1, 2, NULL, 3, 'ann', 'insomnia at night', 10.0)"
    )
    for mid in (1, 9):  # message 9 was never stored: its author is unknown
        conn.execute(
            "INSERT INTO memory_observations (persona, message_id, channel_id, guild_id,"
            " trigger, content, created_at) VALUES ('sleep', ?, 2, NULL, 'insomnia',"
            " 'insomnia at night', 10.0)",
            (mid,),
        )
    conn.close()
    with Store.open(db_path) as store:
        hits = store.search_memory("insomnia", 0.0, None, limit=10)
        authors = {(h.kind, h.message_id, h.author_id) for h in hits}
        assert authors == {("message", 1, 3), ("observation", 1, 3), ("observation", 9, None)}


def test_chat_ids_become_the_text_discord_sends_keeping_each_chat(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = apsw.Connection(str(db_path))
    conn.execute(SCHEMA_VERSION_TABLE)
    for version, migration in enumerate(MIGRATIONS[:7], start=1):
        conn.execute(migration)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    big = 1_234_567_890_123_456_789
    conn.execute(
        "INSERT INTO chat_config VALUES (?, 'always', 'm', NULL, 1.0), (9, 'silent', NULL, 3.0,"
        " 2.0)",
        (big,),
    )
    conn.close()
    with Store.open(db_path) as store:
        assert [
            (c.chat_id, c.attention_mode, c.discriminator_model) for c in store.chat_configs()
        ] == [
            (9, "silent", None),
            (big, "always", "m"),
        ]
        own = store.get_chat_config(9)
        assert own is not None and own.discriminator_threshold is None  # 3.0 was never 0-1
    conn = apsw.Connection(str(db_path))
    assert conn.execute("SELECT typeof(chat_id) FROM chat_config").fetchall() == [("text",)] * 2
    conn.close()


def test_chat_settings_and_users_own_modes_survive_the_chat_config_rebuild(
    db_path: Path,
) -> None:
    db_path.parent.mkdir(parents=True)
    conn = apsw.Connection(str(db_path))
    conn.execute(SCHEMA_VERSION_TABLE)
    for version, migration in enumerate(MIGRATIONS[:8], start=1):
        conn.execute(migration)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    conn.execute("INSERT INTO chat_config VALUES (5, 'silent', 'claude-haiku-9', 0.5, 10.0)")
    conn.execute("INSERT INTO chat_config VALUES (6, 'always', NULL, 7.0, 10.0)")  # never valid
    conn.execute("INSERT INTO chat_user_attention VALUES (5, 7, 'always', 11.0)")
    conn.close()
    with Store.open(db_path) as store:
        assert store.schema_version() == LATEST_VERSION
        assert store.chat_configs() == [
            ChatConfig(5, "silent", "claude-haiku-9", 0.5, 10.0),
            ChatConfig(6, "always", None, None, 10.0),
        ]
        assert [(u.chat_id, u.user_id, u.mode) for u in store.user_attentions()] == [
            (5, 7, "always")
        ]
        store.set_discriminator(8, None, 0.3, 12.0)  # no mode of its own
        assert store.get_chat_config(8) == ChatConfig(8, None, None, 0.3, 12.0)


def test_a_newer_database_is_refused(db_path: Path) -> None:
    Store.open(db_path).close()
    conn = apsw.Connection(str(db_path))
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (LATEST_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="written by a newer picortex"):
        Store.open(db_path)


def test_open_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "picortex.db"
    path.write_bytes(b"this is not sqlite at all, just text" * 100)
    with pytest.raises(StoreError) as info:
        Store.open(path)
    assert str(info.value) == f"{path} is not a SQLite database"


def test_open_a_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path)
    assert str(info.value).startswith(f"{tmp_path} cannot be opened")
    assert "\n" not in str(info.value)


def test_open_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="its folder cannot be created"):
        Store.open(tmp_path / "file" / "picortex.db")


def test_close_is_idempotent(db_path: Path) -> None:
    store = Store.open(db_path)
    store.close()
    store.close()
    with pytest.raises(StoreError):
        store.trust_list()


def test_two_connections_can_both_write(db_path: Path) -> None:
    # The running bot and a CLI command share the file.
    with Store.open(db_path) as bot, Store.open(db_path) as cli:
        bot.set_tier(1, "user")
        cli.set_tier(2, "admin")
        assert bot.trust_list() == [(1, "user"), (2, "admin")]


# ---- transactions -----------------------------------------------------------------------


def test_a_failed_transaction_leaves_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.set_tier(1, "user")
        store.set_runtime_config("wakeword", "?x")
        raise RuntimeError("boom")
    assert store.trust_list() == []
    assert store.runtime_config() == {}


def test_a_nested_failure_rolls_back_only_its_part(store: Store) -> None:
    with store.transaction():
        store.set_tier(1, "user")
        with pytest.raises(RuntimeError), store.transaction():
            store.set_tier(2, "user")
            raise RuntimeError("inner")
        store.set_tier(3, "user")
    assert store.trust_list() == [(1, "user"), (3, "user")]


def test_writes_from_many_threads_all_land(store: Store) -> None:
    def write(base: int) -> None:
        for i in range(50):
            with store.transaction():
                store.set_tier(base + i, "user")
                store.mark_seen_many([(base + i, 1.0, None)])

    threads = [threading.Thread(target=write, args=(n * 1000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.trust_list()) == 200
    assert all(store.is_seen(n * 1000 + 49) for n in range(4))


# ---- trust list -------------------------------------------------------------------------


def test_trust_list(store: Store) -> None:
    assert store.get_tier(7) is None
    store.set_tier(7, "user")
    store.set_tier(3, "admin")
    store.set_tier(7, "trusted")
    assert store.get_tier(7) == "trusted"
    assert store.trust_list() == [(3, "admin"), (7, "trusted")]
    assert store.remove_trust(7) is True
    assert store.remove_trust(7) is False
    assert store.trust_list() == [(3, "admin")]


def test_unknown_tier_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="tier must be one of user, trusted, admin"):
        store.set_tier(1, "owner")
    assert store.trust_list() == []


def test_large_snowflakes_round_trip(store: Store) -> None:
    big = 1_234_567_890_123_456_789
    store.set_tier(big, "user")
    assert store.get_tier(big) == "user"


# ---- runtime config ---------------------------------------------------------------------


def test_runtime_config(store: Store) -> None:
    assert store.runtime_config() == {}
    store.set_runtime_config("wakeword", "?x")
    store.set_runtime_config("attention.group", "always")
    store.set_runtime_config("wakeword", "!y")
    assert store.runtime_config() == {"attention.group": "always", "wakeword": "!y"}
    assert store.delete_runtime_config("wakeword") is True
    assert store.delete_runtime_config("wakeword") is False
    assert store.runtime_config() == {"attention.group": "always"}


# ---- chat config ------------------------------------------------------------------------


def test_chat_config(store: Store) -> None:
    assert store.get_chat_config(10) is None
    store.set_attention_mode(10, "discriminate", 100.0)
    assert store.get_chat_config(10) == ChatConfig(10, "discriminate", None, None, 100.0)
    store.set_attention_mode(10, "silent", 200.0)
    store.set_attention_mode(5, "always", 150.0)
    assert store.get_chat_config(10) == ChatConfig(10, "silent", None, None, 200.0)
    assert [c.chat_id for c in store.chat_configs()] == [5, 10]
    assert store.delete_chat_config(10) is True
    assert store.delete_chat_config(10) is False
    assert store.get_chat_config(10) is None


def test_chat_config_keeps_discriminator_columns_on_mode_change(
    store: Store, db_path: Path
) -> None:
    store.set_attention_mode(10, "discriminate", 1.0)
    conn = apsw.Connection(str(db_path))
    conn.execute("UPDATE chat_config SET discriminator_model = 'm', discriminator_threshold = 0.7")
    conn.close()
    store.set_attention_mode(10, "always", 2.0)
    assert store.get_chat_config(10) == ChatConfig(10, "always", "m", 0.7, 2.0)


def _columns(db_path: Path, table: str) -> list[object]:
    conn = apsw.Connection(str(db_path))
    try:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_chat_config_columns(store: Store, db_path: Path) -> None:
    assert _columns(db_path, "chat_config") == [
        "chat_id",
        "attention_mode",
        "discriminator_model",
        "discriminator_threshold",
        "updated_at",
    ]


def test_unknown_attention_mode_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="attention mode must be one of"):
        store.set_attention_mode(1, "loud", 1.0)


# ---- invocation errors ------------------------------------------------------------------


def test_invocation_errors(store: Store) -> None:
    first = store.add_invocation_error("123", "arnold", 999, "generate", "timeout", "tb", 10.0)
    second = store.add_invocation_error("dm", "default", "888", "post", "403", None, 20.0)
    assert second > first
    assert store.invocation_errors() == [
        InvocationError(
            first, "123", "arnold", "999", "generate", "timeout", "tb", 10.0, None, None
        ),
        InvocationError(second, "dm", "default", "888", "post", "403", None, 20.0, None, None),
    ]
    assert store.resolve_invocation_error(first, "composted", 30.0) is True
    assert store.resolve_invocation_error(12345, "fixed", 30.0) is False
    resolved = store.invocation_error(first)
    assert resolved is not None
    assert (resolved.resolution, resolved.resolved_at) == ("composted", 30.0)
    assert [e.id for e in store.invocation_errors(unresolved_only=True)] == [second]
    assert store.invocation_error(12345) is None


def test_invocation_error_columns(store: Store, db_path: Path) -> None:
    assert _columns(db_path, "invocation_errors") == [
        "id",
        "workspace_id",
        "persona",
        "signal_id",
        "stage",
        "error_message",
        "stack_trace",
        "created_at",
        "resolved_at",
        "resolution",
    ]


def test_invocation_error_values_are_checked(store: Store) -> None:
    with pytest.raises(ValueError, match="stage must be one of"):
        store.add_invocation_error("dm", "p", 1, "dance", "x", None, 1.0)
    eid = store.add_invocation_error("dm", "p", 1, "tiebreak", "x", None, 1.0)
    with pytest.raises(ValueError, match="resolution must be one of"):
        store.resolve_invocation_error(eid, "ignored", 2.0)
    assert store.invocation_errors(unresolved_only=True)[0].id == eid


# ---- budget ledger ----------------------------------------------------------------------


def test_budget_ledger(store: Store) -> None:
    assert store.spend("dm", "2026-05-01") == 0.0
    store.add_spend("dm", "2026-05-01", 0.25, 1.0)
    store.add_spend("dm", "2026-05-01", 0.5, 2.0)
    store.add_spend("42", "2026-05-01", 1.0, 3.0)
    store.add_spend("dm", "2026-05-02", 9.0, 4.0)
    assert store.spend("dm", "2026-05-01") == pytest.approx(0.75)
    assert store.spend("42", "2026-05-02") == 0.0
    assert store.spend_by_workspace("2026-05-01") == pytest.approx({"42": 1.0, "dm": 0.75})
    assert store.spend_by_workspace("1999-01-01") == {}


def test_negative_spend_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="cost_usd must be 0 or more"):
        store.add_spend("dm", "p", -0.1, 1.0)
    with pytest.raises(ValueError):
        store.add_spend("dm", "p", float("nan"), 1.0)


# ---- memory -----------------------------------------------------------------------------


def test_memory_search_finds_messages_and_observations(store: Store) -> None:
    store.add_memory_message(1, 100, 9, 7, "ann", "I slept terribly last night", 50.0)
    store.add_memory_message(2, 100, 9, 7, "ann", "lunch was great", 60.0)
    assert store.add_observation("arnold", 1, 100, 9, "slept", "I slept terribly", 50.0)
    assert not store.add_observation("arnold", 1, 100, 9, "slept", "I slept terribly", 50.0)
    hits = store.search_memory("Why can't I sleep? I SLEPT badly", 0.0, "9")
    assert {(h.kind, h.message_id) for h in hits} == {("message", 1), ("observation", 1)}
    message = next(h for h in hits if h.kind == "message")
    assert (message.author_name, message.channel_id, message.guild_id) == ("ann", 100, 9)
    observation = next(h for h in hits if h.kind == "observation")
    assert (observation.persona, observation.trigger) == ("arnold", "slept")


def test_memory_search_filters(store: Store) -> None:
    store.add_memory_message(1, 100, 9, 7, "ann", "pizza tonight", 10.0)
    store.add_memory_message(2, 200, None, 7, "ann", "pizza in a dm", 20.0)
    store.add_memory_message(3, 300, 8, 7, "bob", "pizza elsewhere", 30.0)

    def ids(hits: list[MemoryHit]) -> list[int]:
        return sorted(h.message_id for h in hits)

    assert ids(store.search_memory("pizza", 0.0, None)) == [1, 2, 3]
    assert ids(store.search_memory("pizza", 0.0, "9")) == [1]
    assert ids(store.search_memory("pizza", 0.0, "dm")) == [2]
    assert ids(store.search_memory("pizza", 15.0, None)) == [2, 3]
    assert ids(store.search_memory("pizza", 0.0, None, channel_id=300)) == [3]
    assert ids(store.search_memory("pizza", 0.0, "not-a-guild")) == []
    assert len(store.search_memory("pizza", 0.0, None, limit=2)) == 2
    assert store.search_memory("pizza", 0.0, None, limit=0) == []
    assert store.search_memory("", 0.0, None) == []


def test_memory_edit_and_delete_keep_the_index_in_step(store: Store, db_path: Path) -> None:
    store.add_memory_message(1, 100, None, 7, "ann", "old words", 10.0)
    store.add_memory_message(1, 100, None, 7, "ann", "new text", 10.0)
    assert store.search_memory("old", 0.0, None) == []
    assert [h.content for h in store.search_memory("new", 0.0, None)] == ["new text"]
    assert store.delete_memory_message(1) is True
    assert store.delete_memory_message(1) is False
    assert store.search_memory("new", 0.0, None) == []
    conn = apsw.Connection(str(db_path))
    for table in ("memory_messages_fts", "memory_observations_fts"):
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    conn.close()


def test_memory_ranks_better_matches_first(store: Store) -> None:
    store.add_memory_message(1, 1, None, 7, "a", "coffee", 10.0)
    store.add_memory_message(2, 1, None, 7, "a", "coffee beans and coffee cups and coffee", 10.0)
    store.add_memory_message(3, 1, None, 7, "a", "tea", 10.0)
    hits = store.search_memory("coffee tea", 0.0, None)
    assert {h.message_id for h in hits} == {1, 2, 3}
    assert hits == sorted(hits, key=lambda h: h.score)


# ---- seen events ------------------------------------------------------------------------


def test_seen_events(store: Store) -> None:
    assert store.is_seen(1) is False
    store.mark_seen_many([(1, 10.0, None)])
    # A repeat keeps its first time.
    store.mark_seen_many([(1, 11.0, None), (2, 20.0, 7), (3, 30.0, 7)])
    assert store.is_seen(1) is True
    assert store.prune_seen(25.0) == 2
    assert (store.is_seen(1), store.is_seen(2), store.is_seen(3)) == (False, False, True)
    assert store.prune_seen(25.0) == 0


def test_seen_events_survive_reopen(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.mark_seen_many([(5, 1.0, None)])
    with Store.open(db_path) as store:
        assert store.is_seen(5) is True


def test_prune_memory_forgets_old_messages_and_observations(store: Store) -> None:
    store.add_memory_message(1, 100, 9, 7, "ann", "old sleep talk", 10.0)
    store.add_memory_message(2, 100, 9, 7, "ann", "new sleep talk", 100.0)
    store.add_observation("sleep", 1, 100, 9, "sleep", "old sleep talk", 10.0)
    store.add_observation("sleep", 2, 100, 9, "sleep", "new sleep talk", 100.0)
    assert store.prune_memory(50.0) == 2
    hits = store.search_memory("sleep", 0.0, None)
    assert {h.message_id for h in hits} == {2}
    assert store.delete_memory_message(2)
    assert store.search_memory("sleep", 0.0, None) == []  # its observation went with it


# ---- growth: ledger roll-up, error cap, trimmed traces ----------------------------------

DAY = 86_400.0


def _ledger_rows(db_path: Path) -> int:
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (count,) = conn.execute("SELECT count(*) FROM budget_ledger").fetchone()  # type: ignore[misc]
    finally:
        conn.close()
    return int(count)


def _totals(store: Store, days: list[float]) -> object:
    periods = ["2022-01", "2022-02"]
    return (
        {(ws, p): store.spend(ws, p) for ws in ("1", "dm") for p in periods},
        [store.spend_by_workspace(p) for p in periods],
        [store.spend_by_user(day) for day in days],
        [store.user_spend(7, day) for day in days],
        store.daily_spend(0.0),
    )


def test_the_ledger_rolls_up_by_day_and_every_total_stays(store: Store, db_path: Path) -> None:
    start = 19_000 * DAY  # a UTC day's start
    days = [start + d * DAY for d in range(5)]
    added = 0
    for d, day in enumerate(days):
        period = "2022-01" if d < 3 else "2022-02"
        for hour in range(6):  # costs in eighths: sums are exact in any order
            for ws, user in (("1", 7), ("1", None), ("dm", 8)):
                store.add_spend(ws, period, (hour + d) / 8, day + hour * 3600.0, user_id=user)
                added += 1
    store.add_spend("1", "2022-01", 0.5, days[1] + 60.0, user_id=9)  # alone on its day: kept
    before = _totals(store, days)
    cutoff = days[3]  # days 0-2 roll up; 3 and 4 keep every row
    assert store.roll_up_ledger(cutoff) == 3 * 3 * (6 - 1)
    assert _ledger_rows(db_path) == added + 1 - 3 * 3 * 5
    assert _totals(store, days) == before
    assert store.roll_up_ledger(cutoff) == 0  # already one row per day
    assert store.roll_up_ledger(days[0]) == 0
    assert _totals(store, days) == before


def test_unresolved_errors_are_capped_oldest_first(store: Store) -> None:
    ids = [store.add_invocation_error("1", "p", i, "generate", f"e{i}", None, i) for i in range(8)]
    store.resolve_invocation_error(ids[0], "fixed", 100.0)
    assert store.cap_unresolved_errors(5) == 2  # ids 1 and 2 go; the resolved one is not counted
    assert [e.id for e in store.invocation_errors()] == [ids[0], *ids[3:]]
    assert store.cap_unresolved_errors(5) == 0


def test_long_stack_traces_are_trimmed_when_stored(store: Store) -> None:
    frames = "".join(f'  File "x.py", line {i}, in f\n    f()\n' for i in range(5_000))
    trace = "Traceback (most recent call last):\n" + frames + "RecursionError: too deep\n"
    eid = store.add_invocation_error("1", "p", 1, "generate", "boom", trace, 1.0)
    stored = store.invocation_error(eid)
    assert stored is not None and stored.stack_trace is not None
    assert len(stored.stack_trace) < 8_100
    assert stored.stack_trace.startswith("Traceback (most recent call last):\n")
    assert stored.stack_trace.endswith("RecursionError: too deep\n")
    assert "characters trimmed" in stored.stack_trace
    short = store.add_invocation_error("1", "p", 2, "generate", "boom", "short trace", 1.0)
    assert store.invocation_error(short).stack_trace == "short trace"  # type: ignore[union-attr]
