"""A real PostgreSQL server for tests: one per test worker, a fresh database per test.

The server runs from Debian's binaries (`initdb`, `pg_ctl`) on a unix socket in a temporary
folder, with fsync off. PostgreSQL refuses to run as root, so as root (CI) it runs as the
`postgres` user through `runuser`. The schema is made once, in a template database; each
test gets a copy (`CREATE DATABASE ... TEMPLATE`, a tenth of a second of the server's CPU),
or a copy an earlier test of this worker used, put back to the template's rows (a few
milliseconds) once nothing is connected to it and its schema is still the template's.

Without the binaries the PostgreSQL tests are skipped, unless PICORTEX_REQUIRE_POSTGRES is
set (CI sets it): then a missing server fails them.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import pytest

if TYPE_CHECKING:
    from picortex.app import Bot

TEMPLATE = "picortex_template"
# How long a used copy's other connections are given to go before it counts as still used.
LINGER_CHECKS: Final = 20
LINGER_PAUSE_SECONDS: Final = 0.05
_RUN_AS = "postgres"


def _binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's versioned folders."""
    found = shutil.which("initdb")
    if found is not None:
        real = Path(found).resolve().parent
        if (real / "pg_ctl").exists():
            return real
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for folder in folders:
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _version(folder: str) -> int:
    part = Path(folder).parent.name
    return int(part) if part.isdigit() else 0


def unavailable(reason: str) -> None:
    """Skip, or fail when PICORTEX_REQUIRE_POSTGRES says the server must be there."""
    if os.environ.get("PICORTEX_REQUIRE_POSTGRES"):
        pytest.fail(f"PostgreSQL is required (PICORTEX_REQUIRE_POSTGRES) but {reason}")
    pytest.skip(f"PostgreSQL tests need {reason.removesuffix(' is missing')}")


@attrs.define
class Server:
    """One running server; `database()` makes a fresh copy of the template."""

    root: Path
    bin: Path
    as_root: bool
    counter: Iterator[int] = attrs.field(factory=itertools.count)
    # The template's rows and sequences, and a fingerprint of its schema (see `_recycle`).
    seed: list[tuple[str, bytes]] = attrs.field(factory=list)
    sequences: list[tuple[str, int, bool]] = attrs.field(factory=list)
    shape: str = ""
    lent: list[str] = attrs.field(factory=list)  # copies handed out, not yet looked at again
    spare: list[str] = attrs.field(factory=list)  # copies put back, ready to hand out

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", _RUN_AS, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        data = self.root / "data"
        self.run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "-N")
        self.up()

    def up(self) -> None:
        """Start the (initialized) server; it answers when this returns."""
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off"
        )
        self.run("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w",
                 "-o", options, "start")  # fmt: skip

    def down(self) -> None:
        """Stop the server as an outage would, keeping what it committed (`up` again)."""
        self.run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")

    def admin_sql(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def make_template(self) -> None:
        import psycopg

        from picortex.store.pg.database import PgDatabase

        self.admin_sql(f"CREATE DATABASE {TEMPLATE}")
        PgDatabase.open(self.url(TEMPLATE)).close()
        with psycopg.connect(self.url(TEMPLATE), autocommit=True) as conn:
            self.shape = _shape(conn)
            for (table,) in conn.execute(_TABLES).fetchall():
                with conn.cursor().copy(f'COPY "{table}" TO STDOUT') as copy:
                    self.seed.append((table, b"".join(bytes(block) for block in copy)))
            for (name,) in conn.execute(_SEQUENCES).fetchall():
                row = conn.execute(f'SELECT last_value, is_called FROM "{name}"').fetchone()
                assert row is not None
                self.sequences.append((name, int(row[0]), bool(row[1])))

    def database(self, *, schema: bool = True) -> str:
        """The URL of a database of its own: a copy of the template, or empty."""
        if schema:
            for name in self.lent:
                if self._recycle(name):
                    self.spare.append(name)
            self.lent.clear()
            if self.spare:
                name = self.spare.pop()
                self.lent.append(name)
                return self.url(name)
        name = f"t_{next(self.counter)}"
        # FILE_COPY: a small template is copied faster as files than through the WAL.
        copy = f" TEMPLATE {TEMPLATE} STRATEGY FILE_COPY" if schema else ""
        self.admin_sql(f"CREATE DATABASE {name}{copy}")
        if schema:
            self.lent.append(name)
        return self.url(name)

    def _recycle(self, name: str) -> bool:
        """Put a used copy back to the template's rows; False if it cannot be trusted to be.

        A copy something still connects to (a leaked thread or process), that refuses
        connections, or whose tables, columns, indexes or functions differ from the
        template's is left alone.
        """
        import psycopg

        try:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                if _still_used(conn) or _shape(conn) != self.shape:
                    return False
                with conn.transaction():
                    # As a replica would: no foreign key or trigger checks while refilling.
                    conn.execute("SET LOCAL session_replication_role = replica")
                    for table, rows in self.seed:
                        conn.execute(f'DELETE FROM "{table}"')
                        if rows:
                            with conn.cursor().copy(f'COPY "{table}" FROM STDIN') as copy:
                                copy.write(rows)
                    for seq, value, called in self.sequences:
                        conn.execute("SELECT setval(%s, %s, %s)", (seq, value, called))
        except psycopg.Error:
            return False
        return True


_TABLES: Final = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
_SEQUENCES: Final = "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1"
# Everything of the schema a test could change: columns, indexes, functions, triggers.
_SHAPE: Final = """
SELECT md5(string_agg(part, ';' ORDER BY part)) FROM (
    SELECT format('%s.%s %s %s %s', table_name, column_name, data_type, is_nullable,
                  column_default) AS part
      FROM information_schema.columns WHERE table_schema = 'public'
    UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
    UNION ALL SELECT p.proname || md5(p.prosrc)
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
    UNION ALL SELECT tgname FROM pg_trigger WHERE NOT tgisinternal
) AS parts
"""


def _shape(conn: Any) -> str:
    row = conn.execute(_SHAPE).fetchone()
    return str(row[0]) if row else ""


def start_server() -> Iterator[Server]:
    """Start a server for the session (or skip/fail, see `unavailable`); stop it after."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg (picortex[cluster]) is missing")
    folder = _binaries()
    if folder is None:
        unavailable("initdb and pg_ctl (Debian's postgresql package) is missing")
        return
    as_root = os.geteuid() == 0
    if as_root:
        try:
            user = pwd.getpwnam(_RUN_AS)
        except KeyError:
            unavailable(f"the `{_RUN_AS}` user (the server refuses to run as root) is missing")
            return
    root = Path(tempfile.mkdtemp(prefix="picortex-pg-"))
    (root / "socket").mkdir()
    if as_root:
        for path in (root, root / "socket"):
            os.chown(path, user.pw_uid, user.pw_gid)
    server = Server(root, folder, as_root)
    try:
        server.start()
        server.make_template()
        yield server
    finally:
        with contextlib.suppress(RuntimeError):  # it never started
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """This worker's PostgreSQL server."""
    yield from start_server()


@pytest.fixture
def pg_url(pg_server: Server) -> str:
    """A fresh database with the schema, for this test alone."""
    return pg_server.database()


@pytest.fixture
def built() -> Iterator[list[Bot]]:
    """Bots a test builds on `pg_url`, closed at its end: one never run (the test failed
    first) would hold its database connections until collected, during a later test."""
    bots: list[Bot] = []
    yield bots
    for bot in bots:
        bot.close()


def _still_used(conn: Any) -> bool:
    """Whether another connection is on `conn`'s database a moment from now: a client that
    just closed leaves its server process behind for a few milliseconds (longer on a loaded
    machine), a leaked one stays."""
    for _ in range(LINGER_CHECKS):
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        if row is not None and not row[0]:
            return False
        time.sleep(LINGER_PAUSE_SECONDS)
    return True
