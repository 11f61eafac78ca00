"""The PostgreSQL backend (SPEC 17): the same named queries as SQLite, over one shared
database, chosen only by `PICORTEX_DATABASE_URL`.

Nothing here imports psycopg: `picortex.store.pg.database` does, and only `open_store` and
`picortex cluster init` import it, once a database URL is set.
"""
