"""What only the PostgreSQL backend has: its schema versions, `picortex cluster init`, the
database URL as a secret, and the choice of backend by PICORTEX_DATABASE_URL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from picortex.cli import main
from picortex.config import load_settings
from picortex.core.redact import REDACTED, redact
from picortex.errors import StoreError
from picortex.store import AdminStore, StoreActor
from picortex.store.backends import MISSING_PSYCOPG, connect_postgres, open_admin
from tests.pg import Server

NOW = 2_000_000_000.0


def _env(home: Path, url: str) -> dict[str, str]:
    return {"PICORTEX_HOME": str(home), "PICORTEX_DATABASE_URL": url}


def test_cluster_init_creates_the_schema_once_and_prints_its_version(
    pg_server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from picortex.store.pg.schema import LATEST_VERSION

    url = pg_server.database(schema=False)
    for name, value in _env(tmp_path, url).items():
        monkeypatch.setenv(name, value)
    assert main(["cluster", "init"]) == 0
    assert main(["cluster", "init"]) == 0  # a second run finds nothing to do
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert all(f"schema version {LATEST_VERSION}" in line for line in out)
    assert all(url not in line for line in out)
    db = connect_postgres(url)
    try:
        versions = db._all("SELECT version FROM schema_version ORDER BY version")
    finally:
        db.close()
    assert versions == [(v,) for v in range(1, LATEST_VERSION + 1)]


def test_cluster_init_without_a_database_url_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.delenv("PICORTEX_DATABASE_URL", raising=False)
    assert main(["cluster", "init"]) == 2
    assert "PICORTEX_DATABASE_URL" in capsys.readouterr().err


def test_a_chat_may_keep_a_threshold_without_a_mode_after_the_schema_moves_on(
    pg_server: Server,
) -> None:
    import psycopg

    from picortex.store.pg.schema import MIGRATIONS, SCHEMA_VERSION_TABLE

    url = pg_server.database(schema=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA_VERSION_TABLE)
        for version, migration in enumerate(MIGRATIONS[:2], start=1):
            conn.execute(migration)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        conn.execute("INSERT INTO chat_config VALUES ('5', 'silent', 'claude-haiku-9', 0.5, 1)")
        conn.execute("INSERT INTO chat_config VALUES ('6', 'always', NULL, 7.0, 1)")
    db = connect_postgres(url)
    try:
        assert [
            (c.chat_id, c.attention_mode, c.discriminator_threshold) for c in db.chat_configs()
        ] == [
            (5, "silent", 0.5),
            (6, "always", None),  # never valid: the default again
        ]
        version = db._one("SELECT version FROM config_changes")
        db.set_discriminator(8, "claude-haiku-9", 0.3, NOW)
        own = db.get_chat_config(8)
        assert own is not None
        assert (own.attention_mode, own.discriminator_model, own.discriminator_threshold) == (
            None,
            "claude-haiku-9",
            0.3,
        )
        # The change still tells every process to reload.
        assert db._one("SELECT version FROM config_changes") != version
        with pytest.raises(StoreError, match="chat_config_threshold_range"):
            db._write("UPDATE chat_config SET discriminator_threshold = 2 WHERE chat_id = '8'")
    finally:
        db.close()


def test_a_database_a_newer_picortex_migrated_is_refused(pg_url: str) -> None:
    db = connect_postgres(pg_url)
    try:
        current = db.schema_version()
        db._write("INSERT INTO schema_version (version) VALUES (%s)", (current + 1,))
    finally:
        db.close()
    with pytest.raises(StoreError, match="newer picortex"):
        connect_postgres(pg_url)


async def test_a_change_made_by_a_command_reaches_the_running_bot(pg_url: str) -> None:
    bot = StoreActor(connect_postgres(pg_url))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bot.run)
            version = bot.config_version
            with open_admin_url(pg_url) as command:
                command.set_tier(7, "trusted")
                command.set_runtime_config("budget.ceiling_usd", "5")
                command.set_attention_mode(10, "silent", NOW)
                command.set_attention_mode(9, "always", NOW)
            with trio.fail_after(20):
                while bot.get_chat_config(10) is None or bot.get_tier(7) is None:
                    await trio.sleep(0.05)
            assert bot.get_tier(7) == "trusted"
            assert bot.runtime_config() == {"budget.ceiling_usd": "5"}
            assert bot.config_version != version
            nursery.cancel_scope.cancel()
    finally:
        bot.close()


def open_admin_url(url: str) -> AdminStore:
    return AdminStore(connect_postgres(url))


def test_chat_ids_kept_as_text_still_list_in_id_order(pg_url: str) -> None:
    with open_admin_url(pg_url) as store:
        for chat_id in (1_300_000_000_000_000_000, 10, 9):
            store.set_attention_mode(chat_id, "silent", NOW)
        assert [c.chat_id for c in store.chat_configs()] == [9, 10, 1_300_000_000_000_000_000]
        assert store.get_chat_config(10) is not None


def test_the_database_url_and_its_password_are_secrets(pg_server: Server, tmp_path: Path) -> None:
    password = "hunter2-but-longer"
    url = f"postgresql://picortex:{password}@/nowhere?host={pg_server.socket_dir}"
    settings = load_settings(_env(tmp_path, url))
    assert settings.database_url == url
    assert password not in repr(settings)
    assert redact(f"connect {url} failed") == f"connect {REDACTED} failed"
    assert password not in redact(f"password={password}")
    # A database that refuses us is named without its URL or password.
    with pytest.raises(StoreError) as refused:
        connect_postgres(url)
    assert password not in str(refused.value) and url not in str(refused.value)


def test_without_a_url_the_store_is_sqlite_and_psycopg_is_never_imported(
    tmp_path: Path,
) -> None:
    code = (
        "import sys\n"
        "from picortex.config import load_settings\n"
        "from picortex.store.backends import open_admin\n"
        f"settings = load_settings({{'PICORTEX_HOME': {str(tmp_path)!r}}})\n"
        "store = open_admin(settings)\n"
        "store.set_tier(1, 'admin')\n"
        "store.close()\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "picortex.db").exists()


def test_a_missing_driver_is_one_sentence_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    monkeypatch.delitem(sys.modules, "picortex.store.pg.database", raising=False)
    settings = load_settings(_env(tmp_path, "postgresql://picortex@db.example/picortex"))
    with pytest.raises(StoreError) as missing:
        open_admin(settings)
    assert str(missing.value) == MISSING_PSYCOPG
    assert "picortex[cluster]" in MISSING_PSYCOPG


def test_a_missing_server_skips_unless_postgres_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.pg import unavailable

    monkeypatch.delenv("PICORTEX_REQUIRE_POSTGRES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="initdb"):
        unavailable("initdb is missing")
    monkeypatch.setenv("PICORTEX_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception, match="required"):
        unavailable("initdb is missing")


def test_backup_of_a_cluster_points_to_pg_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.setenv("PICORTEX_DATABASE_URL", "postgresql://picortex@db.example/picortex")
    assert main(["backup", str(tmp_path / "copy.db")]) == 2
    assert "pg_dump" in capsys.readouterr().err
    assert not (tmp_path / "copy.db").exists()


def test_commands_reading_past_a_broken_config_file_still_use_the_cluster(
    tmp_path: Path,
) -> None:
    from picortex.config import load_settings_for_reading

    (tmp_path / "picortex.toml").write_text("not [valid toml")
    url = "postgresql://picortex:another-long-secret@db.example/picortex"
    settings, problem = load_settings_for_reading(_env(tmp_path, url))
    assert problem is not None
    assert settings.database_url == url
    assert "another-long-secret" not in redact("the password another-long-secret")


async def test_recall_ignores_accents_and_case_like_sqlite(pg_url: str) -> None:
    bot = StoreActor(connect_postgres(pg_url))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bot.run)
            bot.add_memory_message(1, 10, 1, 9, "zoë", "Le Café est Naïf", NOW)
            for query in ("cafe", "CAFÉ", "naif", "zoe"):
                hits = await bot.search_memory(query, 0.0, None)
                assert [h.message_id for h in hits] == [1], query
            nursery.cancel_scope.cancel()
    finally:
        bot.close()


@pytest.mark.virtual_time
async def test_the_bot_answers_and_keeps_its_state_in_postgresql(
    pg_url: str, tmp_path: Path
) -> None:
    from tests.e2e.harness import running_bot

    async with running_bot(tmp_path, env={"PICORTEX_DATABASE_URL": pg_url}) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s whitelist add <@{w.bob_id}> admin")
        await run.sim.wait_bot_messages(1, run.dm_id(w.alice_id))
        run.say(w.general_id, w.alice_id, f"{run.mention()} hello there?")
        replies = await run.sim.wait_bot_messages(1, w.general_id)
        assert "hello there" in replies[0]["content"]
        home = run.home
    with open_admin_url(pg_url) as store:
        assert store.trust_list() == [(w.bob_id, "admin")]
    assert not (home / "picortex.db").exists()
