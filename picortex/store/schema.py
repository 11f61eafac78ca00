"""The database schema as ordered migrations; `schema_version` records which have run.

Append new migrations at the end; never edit one that has shipped. Times are Unix seconds
(REAL, UTC); Discord ids are INTEGER, except a chat's id in `chat_config`, kept as the text
Discord sends (migration 8).
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL DEFAULT (unixepoch('subsec'))
) STRICT;
"""

_V1_CORE: Final = """
CREATE TABLE trust (
    user_id    INTEGER PRIMARY KEY,
    tier       TEXT NOT NULL CHECK (tier IN ('user', 'trusted', 'admin')),
    updated_at REAL NOT NULL DEFAULT (unixepoch('subsec'))
) STRICT;

CREATE TABLE runtime_config (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL DEFAULT (unixepoch('subsec'))
) STRICT;

CREATE TABLE chat_config (
    chat_id                 INTEGER PRIMARY KEY,
    attention_mode          TEXT NOT NULL CHECK (attention_mode IN
        ('always', 'mentions-only', 'discriminate', 'discriminate-quiet', 'silent')),
    discriminator_model     TEXT,
    discriminator_threshold REAL,
    updated_at              REAL NOT NULL
) STRICT;

CREATE TABLE invocation_errors (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id  TEXT NOT NULL,
    persona       TEXT NOT NULL,
    signal_id     TEXT NOT NULL,
    stage         TEXT NOT NULL CHECK (stage IN ('discriminate', 'tiebreak', 'generate', 'post')),
    error_message TEXT NOT NULL,
    stack_trace   TEXT,
    created_at    REAL NOT NULL,
    resolved_at   REAL,
    resolution    TEXT CHECK (resolution IN ('fixed', 'dismissed', 'composted'))
) STRICT;
CREATE INDEX invocation_errors_workspace ON invocation_errors (workspace_id, persona);
CREATE INDEX invocation_errors_resolved ON invocation_errors (resolved_at);

CREATE TABLE budget_ledger (
    id         INTEGER PRIMARY KEY,
    workspace  TEXT NOT NULL,
    period_key TEXT NOT NULL,
    cost_usd   REAL NOT NULL CHECK (cost_usd >= 0),
    at         REAL NOT NULL
) STRICT;
CREATE INDEX budget_ledger_period ON budget_ledger (period_key, workspace);

CREATE TABLE seen_events (
    message_id INTEGER PRIMARY KEY,
    seen_at    REAL NOT NULL
) STRICT;
CREATE INDEX seen_events_seen_at ON seen_events (seen_at);
"""

# Memory: rows live in ordinary tables; external-content FTS5 indexes mirror them through
# triggers, so the index can never drift from the rows inside one transaction.
_V2_MEMORY: Final = """
CREATE TABLE memory_messages (
    message_id  INTEGER PRIMARY KEY,
    channel_id  INTEGER NOT NULL,
    guild_id    INTEGER,
    author_id   INTEGER NOT NULL,
    author_name TEXT NOT NULL,
    content     TEXT NOT NULL,
    created_at  REAL NOT NULL
) STRICT;
CREATE INDEX memory_messages_created ON memory_messages (created_at);

CREATE TABLE memory_observations (
    id         INTEGER PRIMARY KEY,
    persona    TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    channel_id INTEGER NOT NULL,
    guild_id   INTEGER,
    trigger    TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (persona, message_id, trigger)
) STRICT;
CREATE INDEX memory_observations_created ON memory_observations (created_at);

CREATE VIRTUAL TABLE memory_messages_fts USING fts5 (
    content, author_name,
    content = 'memory_messages', content_rowid = 'message_id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_messages_ai AFTER INSERT ON memory_messages BEGIN
    INSERT INTO memory_messages_fts (rowid, content, author_name)
    VALUES (new.message_id, new.content, new.author_name);
END;
CREATE TRIGGER memory_messages_ad AFTER DELETE ON memory_messages BEGIN
    INSERT INTO memory_messages_fts (memory_messages_fts, rowid, content, author_name)
    VALUES ('delete', old.message_id, old.content, old.author_name);
END;
CREATE TRIGGER memory_messages_au AFTER UPDATE ON memory_messages BEGIN
    INSERT INTO memory_messages_fts (memory_messages_fts, rowid, content, author_name)
    VALUES ('delete', old.message_id, old.content, old.author_name);
    INSERT INTO memory_messages_fts (rowid, content, author_name)
    VALUES (new.message_id, new.content, new.author_name);
END;

CREATE VIRTUAL TABLE memory_observations_fts USING fts5 (
    content, trigger,
    content = 'memory_observations', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_observations_ai AFTER INSERT ON memory_observations BEGIN
    INSERT INTO memory_observations_fts (rowid, content, trigger)
    VALUES (new.id, new.content, new.trigger);
END;
CREATE TRIGGER memory_observations_ad AFTER DELETE ON memory_observations BEGIN
    INSERT INTO memory_observations_fts (memory_observations_fts, rowid, content, trigger)
    VALUES ('delete', old.id, old.content, old.trigger);
END;
CREATE TRIGGER memory_observations_au AFTER UPDATE ON memory_observations BEGIN
    INSERT INTO memory_observations_fts (memory_observations_fts, rowid, content, trigger)
    VALUES ('delete', old.id, old.content, old.trigger);
    INSERT INTO memory_observations_fts (rowid, content, trigger)
    VALUES (new.id, new.content, new.trigger);
END;
"""

# Who spent what: the user a call was made for (NULL for calls made for nobody in
# particular, and for rows written before this migration).
_V3_LEDGER_USER: Final = """
ALTER TABLE budget_ledger ADD COLUMN user_id INTEGER;
CREATE INDEX budget_ledger_user ON budget_ledger (user_id, at);
"""

_V4_APP_COMMANDS: Final = """
CREATE TABLE app_commands (
    scope         TEXT PRIMARY KEY,   -- 'global' or 'guild:<guild id>'
    hash          TEXT NOT NULL,      -- digest of the application id, scope and command tree
    registered_at REAL NOT NULL
) STRICT;
"""


# Never lose a trigger: the gateway session to RESUME after a restart (one row per shard),
# and the channels the bot handled messages in lately, for catch-up after a new session.
_V5_RESUME: Final = """
CREATE TABLE gateway_session (
    shard_id           INTEGER PRIMARY KEY,
    shard_count        INTEGER NOT NULL,
    session_id         TEXT NOT NULL,
    resume_gateway_url TEXT NOT NULL,
    seq                INTEGER NOT NULL,
    updated_at         REAL NOT NULL
) STRICT;

CREATE TABLE channel_activity (
    channel_id      INTEGER PRIMARY KEY,
    guild_id        INTEGER,
    last_handled_id INTEGER NOT NULL,
    active_at       REAL NOT NULL
) STRICT;
CREATE INDEX channel_activity_active_at ON channel_activity (active_at);
"""


# An observation keeps its author, so recall can drop what someone no longer trusted said
# and `forget` can find a person's observations. Rows written before this migration take
# the author of the stored message they were made of; any left NULL are never recalled.
_V6_OBSERVATION_AUTHOR: Final = """
ALTER TABLE memory_observations ADD COLUMN author_id INTEGER;
UPDATE memory_observations SET author_id = (
    SELECT m.author_id FROM memory_messages AS m
    WHERE m.message_id = memory_observations.message_id
);
CREATE INDEX memory_observations_author ON memory_observations (author_id);
CREATE INDEX memory_messages_author ON memory_messages (author_id);
"""


# The pruner rolls up ledger rows older than 90 days by day: found by time, not by a scan.
_V7_LEDGER_AT: Final = """
CREATE INDEX budget_ledger_at ON budget_ledger (at);
"""


# Per-user attention overrides (SPEC 18): a user's own mode in one chat beats the chat's.
_V8_CHAT_USER_ATTENTION: Final = """
CREATE TABLE chat_user_attention (
    chat_id    INTEGER NOT NULL,
    user_id    INTEGER NOT NULL,
    mode       TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, user_id)
) STRICT;
"""


# A chat's settings are keyed by its id as the text Discord sends, and a chat may have a
# discriminator model or threshold of its own without a mode of its own (NULL: the default).
# Rebuilds chat_config only; chat_user_attention (migration 8) is left as it is.
_V9_CHAT_CONFIG_TEXT_IDS: Final = """
CREATE TABLE chat_config_v9 (
    chat_id                 TEXT PRIMARY KEY,
    attention_mode          TEXT CHECK (attention_mode IS NULL OR attention_mode IN
        ('always', 'mentions-only', 'discriminate', 'discriminate-quiet', 'silent')),
    discriminator_model     TEXT,
    discriminator_threshold REAL CHECK (discriminator_threshold IS NULL OR
        discriminator_threshold BETWEEN 0 AND 1),
    updated_at              REAL NOT NULL
) STRICT;
INSERT INTO chat_config_v9
    SELECT CAST(chat_id AS TEXT), attention_mode, discriminator_model,
        CASE WHEN discriminator_threshold BETWEEN 0 AND 1 THEN discriminator_threshold END,
        updated_at
    FROM chat_config;
DROP TABLE chat_config;
ALTER TABLE chat_config_v9 RENAME TO chat_config;
"""


# A handled mark keeps its message's guild (NULL: a DM, or a mark made before this), so the
# marks of one shard can be read alone (SPEC 17).
_V10_SEEN_GUILD: Final = """
ALTER TABLE seen_events ADD COLUMN guild_id INTEGER;
"""


MIGRATIONS: Final[tuple[str, ...]] = (
    _V1_CORE,
    _V2_MEMORY,
    _V3_LEDGER_USER,
    _V4_APP_COMMANDS,
    _V5_RESUME,
    _V6_OBSERVATION_AUTHOR,
    _V7_LEDGER_AT,
    _V8_CHAT_USER_ATTENTION,
    _V9_CHAT_CONFIG_TEXT_IDS,
    _V10_SEEN_GUILD,
)
"""Migration N (1-based) is MIGRATIONS[N - 1]; each runs once, in its own transaction."""

LATEST_VERSION: Final = len(MIGRATIONS)
