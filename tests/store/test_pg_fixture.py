"""The test databases: a copy an earlier test used comes back as the template left it."""

from __future__ import annotations

import psycopg

from tests.pg import Server

_ERROR = (
    "INSERT INTO invocation_errors (workspace_id, persona, signal_id, stage, error_message,"
    " created_at) VALUES ('w', 'p', 's', 'post', 'e', 1)"
)


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return int(row[0])


def test_a_used_copy_comes_back_with_the_templates_rows_and_sequences(pg_server: Server) -> None:
    url = pg_server.database()
    seeded = _count(url, "SELECT version FROM config_changes")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO trust (user_id, tier) VALUES (1, 'trusted')")
        conn.execute("UPDATE config_changes SET version = version + 5")
        conn.execute(_ERROR)
    again = pg_server.database()
    assert again == url  # the same copy, handed out again
    assert _count(again, "SELECT count(*) FROM trust") == 0
    assert _count(again, "SELECT version FROM config_changes") == seeded
    with psycopg.connect(again, autocommit=True) as conn:
        conn.execute(_ERROR)
    assert _count(again, "SELECT max(id) FROM invocation_errors") == 1  # its sequence starts over


def test_a_copy_still_in_use_or_changed_is_never_handed_out_again(pg_server: Server) -> None:
    held_url = pg_server.database()
    changed_url = pg_server.database()
    with psycopg.connect(changed_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE trust ADD COLUMN note text")
    with psycopg.connect(held_url, autocommit=True):
        first = pg_server.database()
        second = pg_server.database()
    assert {first, second}.isdisjoint({held_url, changed_url})
