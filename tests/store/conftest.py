"""The store's tests run on SQLite and on a real PostgreSQL (see tests/pg.py)."""

from tests.pg import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]
