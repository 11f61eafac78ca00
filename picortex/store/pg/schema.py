"""The PostgreSQL schema as numbered, forward-only migrations; `schema_version` records them.

The same tables as the SQLite schema (`picortex.store.schema`). Append new migrations at
the end; never edit one that has shipped. Times are Unix seconds (double precision, UTC);
Discord ids are bigint, except chat ids, kept as the text Discord sends. Memory is searched
through a generated `tsvector` column with a GIN index (words folded to lower case and
without accents, never stemmed, like SQLite's unicode61 tokenizer).
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION_TABLE: Final = """
CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
)
"""

# A row per change of what every process keeps in memory (trust, runtime config, chat
# config): a process polls its single counter cheaply and reloads only when it moved.
_V1_CORE: Final = """
CREATE TABLE trust (
    user_id    bigint PRIMARY KEY,
    tier       text NOT NULL CHECK (tier IN ('user', 'trusted', 'admin')),
    updated_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);

CREATE TABLE runtime_config (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);

CREATE TABLE chat_config (
    chat_id                 text PRIMARY KEY,
    attention_mode          text NOT NULL CHECK (attention_mode IN
        ('always', 'mentions-only', 'discriminate', 'discriminate-quiet', 'silent')),
    discriminator_model     text,
    discriminator_threshold double precision,
    updated_at              double precision NOT NULL
);

CREATE TABLE config_changes (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL
);
INSERT INTO config_changes (version) VALUES (0);

CREATE FUNCTION picortex_config_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE config_changes SET version = version + 1;
    RETURN NULL;
END $$;
CREATE TRIGGER trust_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON trust
    FOR EACH STATEMENT EXECUTE FUNCTION picortex_config_changed();
CREATE TRIGGER runtime_config_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON runtime_config FOR EACH STATEMENT EXECUTE FUNCTION picortex_config_changed();
CREATE TRIGGER chat_config_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON chat_config
    FOR EACH STATEMENT EXECUTE FUNCTION picortex_config_changed();

CREATE TABLE invocation_errors (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  text NOT NULL,
    persona       text NOT NULL,
    signal_id     text NOT NULL,
    stage         text NOT NULL CHECK (stage IN ('discriminate', 'tiebreak', 'generate', 'post')),
    error_message text NOT NULL,
    stack_trace   text,
    created_at    double precision NOT NULL,
    resolved_at   double precision,
    resolution    text CHECK (resolution IN ('fixed', 'dismissed', 'composted'))
);
CREATE INDEX invocation_errors_workspace ON invocation_errors (workspace_id, persona);
CREATE INDEX invocation_errors_resolved ON invocation_errors (resolved_at);

CREATE TABLE budget_ledger (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace  text NOT NULL,
    period_key text NOT NULL,
    cost_usd   double precision NOT NULL CHECK (cost_usd >= 0),
    at         double precision NOT NULL,
    user_id    bigint
);
CREATE INDEX budget_ledger_period ON budget_ledger (period_key, workspace);
CREATE INDEX budget_ledger_user ON budget_ledger (user_id, at);
CREATE INDEX budget_ledger_at ON budget_ledger (at);

CREATE TABLE seen_events (
    message_id bigint PRIMARY KEY,
    guild_id   bigint,
    seen_at    double precision NOT NULL
);
CREATE INDEX seen_events_seen_at ON seen_events (seen_at);
CREATE INDEX seen_events_guild ON seen_events (guild_id, message_id);

-- Words as SQLite's unicode61 tokenizer makes them: folded to lower case, accents removed
-- where the unaccent extension can be had, never stemmed.
DO $$
BEGIN
    CREATE TEXT SEARCH CONFIGURATION picortex_words (COPY = simple);
    BEGIN
        CREATE EXTENSION IF NOT EXISTS unaccent;
        ALTER TEXT SEARCH CONFIGURATION picortex_words
            ALTER MAPPING FOR hword, hword_part, word WITH unaccent, simple;
    EXCEPTION WHEN OTHERS THEN
        NULL;  -- without it accents count: "café" and "cafe" are two words
    END;
END $$;

CREATE TABLE memory_messages (
    message_id  bigint PRIMARY KEY,
    channel_id  bigint NOT NULL,
    guild_id    bigint,
    author_id   bigint NOT NULL,
    author_name text NOT NULL,
    content     text NOT NULL,
    created_at  double precision NOT NULL,
    words       tsvector GENERATED ALWAYS AS
        (to_tsvector('picortex_words', content || ' ' || author_name)) STORED
);
CREATE INDEX memory_messages_created ON memory_messages (created_at);
CREATE INDEX memory_messages_author ON memory_messages (author_id);
CREATE INDEX memory_messages_channel ON memory_messages (channel_id);
CREATE INDEX memory_messages_words ON memory_messages USING gin (words);

CREATE TABLE memory_observations (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    persona    text NOT NULL,
    message_id bigint NOT NULL,
    channel_id bigint NOT NULL,
    guild_id   bigint,
    trigger    text NOT NULL,
    content    text NOT NULL,
    created_at double precision NOT NULL,
    author_id  bigint,
    words      tsvector GENERATED ALWAYS AS
        (to_tsvector('picortex_words', content || ' ' || trigger)) STORED,
    UNIQUE (persona, message_id, trigger)
);
CREATE INDEX memory_observations_created ON memory_observations (created_at);
CREATE INDEX memory_observations_author ON memory_observations (author_id);
CREATE INDEX memory_observations_message ON memory_observations (message_id);
CREATE INDEX memory_observations_channel ON memory_observations (channel_id);
CREATE INDEX memory_observations_words ON memory_observations USING gin (words);

CREATE TABLE app_commands (
    scope         text PRIMARY KEY,
    hash          text NOT NULL,
    registered_at double precision NOT NULL
);

CREATE TABLE gateway_session (
    shard_id           integer PRIMARY KEY,
    shard_count        integer NOT NULL,
    session_id         text NOT NULL,
    resume_gateway_url text NOT NULL,
    seq                bigint NOT NULL,
    updated_at         double precision NOT NULL
);

CREATE TABLE channel_activity (
    channel_id      bigint PRIMARY KEY,
    guild_id        bigint,
    last_handled_id bigint NOT NULL,
    active_at       double precision NOT NULL
);
CREATE INDEX channel_activity_active_at ON channel_activity (active_at);
"""

# Per-user attention overrides (SPEC 18): a user's own mode in one chat beats the chat's.
# A change is a config change: every process reloads its copy (the same counter).
_V2_CHAT_USER_ATTENTION: Final = """
CREATE TABLE chat_user_attention (
    chat_id    text NOT NULL,
    user_id    bigint NOT NULL,
    mode       text NOT NULL CHECK (mode IN
        ('always', 'mentions-only', 'discriminate', 'discriminate-quiet', 'silent')),
    updated_at double precision NOT NULL,
    PRIMARY KEY (chat_id, user_id)
);
CREATE TRIGGER chat_user_attention_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON chat_user_attention FOR EACH STATEMENT EXECUTE FUNCTION picortex_config_changed();
CREATE INDEX invocation_errors_unresolved_at ON invocation_errors (created_at)
    WHERE resolved_at IS NULL;
"""

# A chat may have a discriminator model or threshold of its own without a mode of its own
# (NULL: the default); a threshold outside 0..1 was never valid and becomes the default.
# Altered in place, so the config-changed trigger stays on the table.
_V3_CHAT_CONFIG_OPTIONAL_MODE: Final = """
ALTER TABLE chat_config ALTER COLUMN attention_mode DROP NOT NULL;
UPDATE chat_config SET discriminator_threshold = NULL
    WHERE NOT discriminator_threshold BETWEEN 0 AND 1;
ALTER TABLE chat_config ADD CONSTRAINT chat_config_threshold_range
    CHECK (discriminator_threshold IS NULL OR discriminator_threshold BETWEEN 0 AND 1);
"""

# Every config change also notifies (in the writing transaction, so listeners hear it at
# commit) with the counter's new value: a listener that sees a gap missed one and reloads.
_V4_CONFIG_NOTIFY: Final = """
CREATE OR REPLACE FUNCTION picortex_config_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    new_version bigint;
BEGIN
    UPDATE config_changes SET version = version + 1 RETURNING version INTO new_version;
    PERFORM pg_notify('picortex_config', new_version::text);
    RETURN NULL;
END $$;
"""

# The processes of the cluster, as each last told (a heartbeat every few seconds), for
# `picortex cluster status`: node name, host, pid and the shards it serves.
_V5_CLUSTER_NODE: Final = """
CREATE TABLE cluster_node (
    node       text PRIMARY KEY,
    host       text NOT NULL,
    pid        integer NOT NULL,
    shards     text NOT NULL,
    started_at double precision NOT NULL,
    last_seen  double precision NOT NULL
);
"""

# Shard leases (SPEC 17): a process serves a shard only while it holds its lease, renewed
# every few seconds. Times are the database's clock (`picortex_now()`, Unix seconds), so
# processes never compare their own; `epoch` counts a shard's holdings (+1 each time it is
# taken by another, or after it was handed back), and `node` is NULL once handed back.
_V6_SHARD_LEASE: Final = """
CREATE TABLE shard_lease (
    shard_id    integer PRIMARY KEY,
    shard_count integer NOT NULL,
    node        text,
    epoch       bigint NOT NULL,
    expires_at  double precision NOT NULL
);
CREATE FUNCTION picortex_now() RETURNS double precision LANGUAGE sql VOLATILE
    AS $$ SELECT extract(epoch FROM clock_timestamp())::float8 $$;
"""

# Ceilings for the cluster (SPEC 9, 17): money as integer micro-dollars. Spend per level and
# period (the global total, a user's UTC day, a workspace), the money running calls hold
# (`budget_reservation`, a row per call until settled), each user's call starts (the
# per-minute limit), and the one process that says "spent" once per period
# (`budget_notice`). Reserving and settling lock the counters in one fixed order: global,
# user, workspace (`picortex_budget_lock`), so two calls never wait on each other crosswise.
_V7_CLUSTER_CEILINGS: Final = """
CREATE TABLE budget_counter (
    scope        text NOT NULL CHECK (scope IN ('global', 'user', 'workspace')),
    name         text NOT NULL,
    period       text NOT NULL,
    spent_micros bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, name, period)
);
INSERT INTO budget_counter (scope, name, period, spent_micros)
    SELECT 'global', '', period_key, ceil(sum(cost_usd) * 1000000)::bigint
    FROM budget_ledger GROUP BY period_key;
INSERT INTO budget_counter (scope, name, period, spent_micros)
    SELECT 'workspace', workspace, period_key, ceil(sum(cost_usd) * 1000000)::bigint
    FROM budget_ledger GROUP BY workspace, period_key;
INSERT INTO budget_counter (scope, name, period, spent_micros)
    SELECT 'user', user_id::text, to_char(to_timestamp(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           ceil(sum(cost_usd) * 1000000)::bigint
    FROM budget_ledger WHERE user_id IS NOT NULL GROUP BY 2, 3;

-- A settled row stays a day (settled_at set), so a settlement sent twice counts once.
CREATE TABLE budget_reservation (
    id            uuid PRIMARY KEY,
    node          text NOT NULL,
    workspace     text NOT NULL,
    user_id       bigint,
    amount_micros bigint NOT NULL CHECK (amount_micros >= 0),
    created_at    double precision NOT NULL,
    expires_at    double precision NOT NULL,
    settled_at    double precision
);
CREATE INDEX budget_reservation_open_workspace ON budget_reservation (workspace)
    WHERE settled_at IS NULL;
CREATE INDEX budget_reservation_open_user ON budget_reservation (user_id)
    WHERE settled_at IS NULL;
CREATE INDEX budget_reservation_settled ON budget_reservation (settled_at);

CREATE TABLE budget_request (
    user_id bigint NOT NULL,
    at      double precision NOT NULL
);
CREATE INDEX budget_request_user ON budget_request (user_id, at);

CREATE TABLE budget_notice (
    kind   text NOT NULL,
    scope  text NOT NULL,
    period text NOT NULL,
    PRIMARY KEY (kind, scope, period)
);

-- Whether a reservation still holds money: until settled, while its node tells its
-- heartbeat; a dead node's until it expires (at its worst case, as if spent).
CREATE FUNCTION picortex_budget_holds(r budget_reservation, p_now double precision,
                                      p_live_seconds double precision)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT r.settled_at IS NULL AND (r.expires_at > p_now OR EXISTS (
        SELECT 1 FROM cluster_node n
        WHERE n.node = r.node AND n.last_seen >= p_now - p_live_seconds))
$$;

-- Lock the counters a call touches, always global, then user, then workspace; returns
-- what each has spent (0 for a call without a user).
CREATE FUNCTION picortex_budget_lock(p_period text, p_day text, p_workspace text,
                                     p_user bigint,
                                     OUT global_spent bigint, OUT user_spent bigint,
                                     OUT workspace_spent bigint)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO budget_counter (scope, name, period) VALUES ('global', '', p_period)
        ON CONFLICT DO NOTHING;
    SELECT spent_micros INTO global_spent FROM budget_counter
        WHERE scope = 'global' AND name = '' AND period = p_period FOR UPDATE;
    user_spent := 0;
    IF p_user IS NOT NULL THEN
        INSERT INTO budget_counter (scope, name, period) VALUES ('user', p_user::text, p_day)
            ON CONFLICT DO NOTHING;
        SELECT spent_micros INTO user_spent FROM budget_counter
            WHERE scope = 'user' AND name = p_user::text AND period = p_day FOR UPDATE;
    END IF;
    INSERT INTO budget_counter (scope, name, period) VALUES ('workspace', p_workspace, p_period)
        ON CONFLICT DO NOTHING;
    SELECT spent_micros INTO workspace_spent FROM budget_counter
        WHERE scope = 'workspace' AND name = p_workspace AND period = p_period FOR UPDATE;
END $$;

-- The one process that says so: true for the first to tell `kind` about `scope` in `period`.
CREATE FUNCTION picortex_budget_notice(p_kind text, p_scope text, p_period text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    won boolean;
BEGIN
    INSERT INTO budget_notice (kind, scope, period) VALUES (p_kind, p_scope, p_period)
        ON CONFLICT DO NOTHING RETURNING true INTO won;
    IF won THEN  -- earlier periods of the same scope are over: one row per scope stays
        DELETE FROM budget_notice WHERE kind = p_kind AND scope = p_scope AND period <> p_period;
    END IF;
    RETURN coalesce(won, false);
END $$;

-- SPEC 9's admit rule (`picortex.core.budget.admit`) over the whole cluster, in one
-- transaction: refuse when spent plus held has reached a ceiling (workspace, global, the
-- user's day), or the user started `p_user_rate` calls in the last minute; else hold
-- `p_amount` under `p_id`. A refusal also says whether this process is the one to warn
-- (and to tell the user) for this period.
CREATE FUNCTION picortex_budget_reserve(
    p_id uuid, p_node text, p_workspace text, p_user bigint, p_amount bigint,
    p_period text, p_day text, p_ceiling bigint, p_global_ceiling bigint,
    p_user_daily bigint, p_user_rate integer, p_user_limited boolean,
    p_hold_seconds double precision, p_live_seconds double precision,
    p_now double precision DEFAULT NULL,
    OUT refused text, OUT workspace_spent bigint, OUT workspace_held bigint,
    OUT global_spent bigint, OUT global_held bigint, OUT user_spent bigint,
    OUT user_held bigint, OUT user_recent integer, OUT warn boolean, OUT tell boolean,
    OUT live_nodes integer)
LANGUAGE plpgsql AS $$
DECLARE
    now_ double precision := coalesce(p_now, extract(epoch FROM clock_timestamp()));
    minute text;
BEGIN
    SELECT l.global_spent, l.user_spent, l.workspace_spent
        INTO global_spent, user_spent, workspace_spent
        FROM picortex_budget_lock(p_period, p_day, p_workspace, p_user) AS l;
    SELECT coalesce(sum(r.amount_micros), 0) INTO global_held FROM budget_reservation r
        WHERE r.settled_at IS NULL AND picortex_budget_holds(r, now_, p_live_seconds);
    SELECT coalesce(sum(r.amount_micros), 0) INTO workspace_held FROM budget_reservation r
        WHERE r.settled_at IS NULL AND r.workspace = p_workspace
          AND picortex_budget_holds(r, now_, p_live_seconds);
    user_held := 0;
    user_recent := 0;
    IF p_user IS NOT NULL THEN
        SELECT coalesce(sum(r.amount_micros), 0) INTO user_held FROM budget_reservation r
            WHERE r.settled_at IS NULL AND r.user_id = p_user
              AND picortex_budget_holds(r, now_, p_live_seconds);
        DELETE FROM budget_request WHERE user_id = p_user AND at <= now_ - 60;
        SELECT count(*) INTO user_recent FROM budget_request WHERE user_id = p_user;
    END IF;
    SELECT count(*) INTO live_nodes FROM cluster_node WHERE last_seen >= now_ - p_live_seconds;
    warn := false;
    tell := false;
    IF NOT workspace_spent + workspace_held < p_ceiling THEN
        refused := 'workspace';
    ELSIF NOT global_spent + global_held < p_global_ceiling THEN
        refused := 'global';
    ELSIF p_user_limited AND p_user_daily > 0 AND NOT user_spent + user_held < p_user_daily THEN
        refused := 'user_daily';
    ELSIF p_user_limited AND p_user_rate > 0 AND user_recent >= p_user_rate THEN
        refused := 'user_rate';
    END IF;
    IF refused IS NULL THEN
        INSERT INTO budget_reservation (id, node, workspace, user_id, amount_micros,
                                        created_at, expires_at)
            VALUES (p_id, p_node, p_workspace, p_user, p_amount, now_, now_ + p_hold_seconds);
        IF p_user IS NOT NULL THEN
            INSERT INTO budget_request (user_id, at) VALUES (p_user, now_);
        END IF;
        RETURN;
    END IF;
    minute := floor(now_ / 60)::bigint::text;
    warn := picortex_budget_notice('warn:' || refused,
        CASE refused WHEN 'workspace' THEN p_workspace WHEN 'global' THEN ''
             ELSE p_user::text END,
        CASE refused WHEN 'user_daily' THEN p_day WHEN 'user_rate' THEN minute
             ELSE p_period END);
    IF refused IN ('user_daily', 'user_rate') THEN
        tell := picortex_budget_notice('tell:' || refused, p_user::text,
            CASE refused WHEN 'user_daily' THEN p_day ELSE minute END);
    END IF;
END $$;

-- Settle a call: lock as reserving does, mark its reservation settled (a settlement sent
-- twice counts once; one for a call reserved while the database was unreachable makes its
-- row), and add what it cost to the counters and the ledger. False: settled already.
CREATE FUNCTION picortex_budget_settle(
    p_id uuid, p_node text, p_workspace text, p_user bigint, p_cost bigint,
    p_period text, p_day text, p_at double precision, p_now double precision DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    now_ double precision := coalesce(p_now, extract(epoch FROM clock_timestamp()));
    settled boolean;
BEGIN
    PERFORM picortex_budget_lock(p_period, p_day, p_workspace, p_user);
    INSERT INTO budget_reservation AS r (id, node, workspace, user_id, amount_micros,
                                         created_at, expires_at, settled_at)
        VALUES (p_id, p_node, p_workspace, p_user, 0, now_, now_, now_)
        ON CONFLICT (id) DO UPDATE SET settled_at = excluded.settled_at
            WHERE r.settled_at IS NULL
        RETURNING true INTO settled;
    IF settled IS NULL THEN
        RETURN false;
    END IF;
    IF p_cost > 0 THEN
        UPDATE budget_counter SET spent_micros = spent_micros + p_cost
            WHERE (scope = 'global' AND name = '' AND period = p_period)
               OR (scope = 'user' AND name = p_user::text AND period = p_day)
               OR (scope = 'workspace' AND name = p_workspace AND period = p_period);
        INSERT INTO budget_ledger (workspace, period_key, cost_usd, at, user_id)
            VALUES (p_workspace, p_period, p_cost / 1000000.0, p_at, p_user);
    END IF;
    RETURN true;
END $$;
"""

# Discord's limits shared by the processes (SPEC 17). The global REST limit is a row per
# request slot: a grant takes free slots for the next window in one statement (rows another
# process is taking are skipped, never waited for), and a global 429 pauses every process
# until `rest_global_pause.until`. `identify_bucket` is each identify bucket's last IDENTIFY
# (shard_id % max_concurrency); the bucket itself is held with an advisory lock. Times are on
# the database's clock unless a caller passes its own (`at`, for tests).
_V8_DISCORD_LIMITS: Final = """
CREATE TABLE rest_global_slot (
    slot    integer PRIMARY KEY,
    free_at double precision NOT NULL DEFAULT 0
);
INSERT INTO rest_global_slot (slot) SELECT generate_series(0, 49);

CREATE TABLE rest_global_pause (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    until double precision NOT NULL DEFAULT 0
);
INSERT INTO rest_global_pause DEFAULT VALUES;

CREATE TABLE identify_bucket (
    bucket      integer PRIMARY KEY,
    identify_at double precision NOT NULL
);

CREATE FUNCTION picortex_global_grant(
    wanted integer, budget integer, window_seconds double precision, at_time double precision
) RETURNS TABLE (
    granted integer, db_now double precision, retry_at double precision,
    paused_until double precision
) LANGUAGE plpgsql AS $$
DECLARE
    t double precision := coalesce(at_time, extract(epoch FROM clock_timestamp()));
BEGIN
    db_now := t;
    SELECT until INTO paused_until FROM rest_global_pause;
    IF paused_until > t THEN
        granted := 0;
        retry_at := paused_until;
        RETURN NEXT;
        RETURN;
    END IF;
    WITH free AS (
        SELECT slot FROM rest_global_slot
        WHERE slot < budget AND free_at <= t
        ORDER BY slot LIMIT wanted
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        UPDATE rest_global_slot AS s SET free_at = t + window_seconds
        FROM free WHERE s.slot = free.slot
        RETURNING s.slot
    )
    SELECT count(*) INTO granted FROM taken;
    retry_at := t;
    IF granted < wanted THEN
        SELECT min(free_at) INTO retry_at FROM rest_global_slot WHERE slot < budget;
        retry_at := greatest(retry_at, t);
    END IF;
    RETURN NEXT;
END $$;
"""

# Slots a process keeps in hand for its next answer (`picortex_global_keep`) carry its name
# (`holder`), so that it can give back those it did not use (`picortex_global_give_back`)
# when another process finds the table short: a burst elsewhere then has them at once
# instead of once their window ends. A grant that comes back short says so on
# `picortex_global_short` while any slot is kept in hand. A kept slot is given back only by
# its holder, which first drops it from its own hand: a slot that was used is never freed
# early.
_V9_KEPT_SLOTS: Final = """
ALTER TABLE rest_global_slot ADD COLUMN holder text;

CREATE OR REPLACE FUNCTION picortex_global_grant(
    wanted integer, budget integer, window_seconds double precision, at_time double precision
) RETURNS TABLE (
    granted integer, db_now double precision, retry_at double precision,
    paused_until double precision
) LANGUAGE plpgsql AS $$
DECLARE
    t double precision := coalesce(at_time, extract(epoch FROM clock_timestamp()));
BEGIN
    db_now := t;
    SELECT until INTO paused_until FROM rest_global_pause;
    IF paused_until > t THEN
        granted := 0;
        retry_at := paused_until;
        RETURN NEXT;
        RETURN;
    END IF;
    WITH free AS (
        SELECT slot FROM rest_global_slot
        WHERE slot < budget AND free_at <= t
        ORDER BY slot LIMIT wanted
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        UPDATE rest_global_slot AS s SET free_at = t + window_seconds, holder = NULL
        FROM free WHERE s.slot = free.slot
        RETURNING s.slot
    )
    SELECT count(*) INTO granted FROM taken;
    retry_at := t;
    IF granted < wanted THEN
        SELECT min(free_at) INTO retry_at FROM rest_global_slot WHERE slot < budget;
        retry_at := greatest(retry_at, t);
        IF EXISTS (
            SELECT 1 FROM rest_global_slot
            WHERE slot < budget AND holder IS NOT NULL AND free_at > t
        ) THEN
            PERFORM pg_notify('picortex_global_short', '');
        END IF;
    END IF;
    RETURN NEXT;
END $$;

CREATE FUNCTION picortex_global_keep(
    wanted integer, budget integer, window_seconds double precision, margin integer,
    holder_name text, at_time double precision
) RETURNS TABLE (
    granted integer, db_now double precision, retry_at double precision,
    paused_until double precision
) LANGUAGE plpgsql AS $$
DECLARE
    t double precision := coalesce(at_time, extract(epoch FROM clock_timestamp()));
    free_now integer;
BEGIN
    db_now := t;
    retry_at := t;
    granted := 0;
    SELECT until INTO paused_until FROM rest_global_pause;
    IF paused_until > t THEN
        retry_at := paused_until;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT count(*) INTO free_now FROM rest_global_slot WHERE slot < budget AND free_at <= t;
    IF free_now >= wanted + margin THEN
        WITH free AS (
            SELECT slot FROM rest_global_slot
            WHERE slot < budget AND free_at <= t
            ORDER BY slot LIMIT wanted
            FOR UPDATE SKIP LOCKED
        ), taken AS (
            UPDATE rest_global_slot AS s SET free_at = t + window_seconds, holder = holder_name
            FROM free WHERE s.slot = free.slot
            RETURNING s.slot
        )
        SELECT count(*) INTO granted FROM taken;
    END IF;
    RETURN NEXT;
END $$;

CREATE FUNCTION picortex_global_give_back(
    holder_name text, granted_at double precision, window_seconds double precision,
    how_many integer
) RETURNS integer LANGUAGE sql AS $$
    WITH mine AS (
        SELECT slot FROM rest_global_slot
        WHERE holder = holder_name AND free_at = granted_at + window_seconds
        ORDER BY slot LIMIT how_many
        FOR UPDATE
    ), freed AS (
        UPDATE rest_global_slot AS s SET free_at = 0, holder = NULL
        FROM mine WHERE s.slot = mine.slot
        RETURNING s.slot
    )
    SELECT count(*)::integer FROM freed
$$;
"""

MIGRATIONS: Final[tuple[str, ...]] = (
    _V1_CORE,
    _V2_CHAT_USER_ATTENTION,
    _V3_CHAT_CONFIG_OPTIONAL_MODE,
    _V4_CONFIG_NOTIFY,
    _V5_CLUSTER_NODE,
    _V6_SHARD_LEASE,
    _V7_CLUSTER_CEILINGS,
    _V8_DISCORD_LIMITS,
    _V9_KEPT_SLOTS,
)
"""Migration N (1-based) is MIGRATIONS[N - 1]; each runs once, in its own transaction."""

LATEST_VERSION: Final = len(MIGRATIONS)
