"""The Discord simulator: REST and gateway on loopback, an offline model, and a control API.

`await nursery.start(sim.serve)` returns the URLs; the methods below build the world, act as
users, read what the bot did, and inject faults. Call them from the trio run that serves.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import orjson
import trio

from picortex.sim.control import handle_control
from picortex.sim.gateway import DEFAULT_HEARTBEAT_MS, Delivery, GatewayHub, GatewayStats
from picortex.sim.httpserver import HttpRequest, HttpResponse, serve_http
from picortex.sim.interactions import SimInteraction
from picortex.sim.model import OfflineModel
from picortex.sim.ratelimit import GlobalStats, RateLimiter
from picortex.sim.rest import API_PREFIX, DiscordRest, InjectedError, RecordedRequest
from picortex.sim.snowflake import DiscordClock, SnowflakeFactory, iso_timestamp
from picortex.sim.world import (
    GUILD_TEXT,
    INTENT_GUILD_MESSAGES,
    PRIVILEGED_INTENTS,
    Json,
    SimError,
    World,
)
from picortex.types import snowflake_ms

CONTROL_TOKEN_BYTES: Final = 24  # 192 random bits, like a session token
BOT_TOKEN_BYTES: Final = 24
# Name of the user that blasted benchmark messages come from.
BENCH_AUTHOR: Final = "bench-user"
# Words blasted messages are made of: varied text compresses like real chat, unlike repeats.
_WORD_TEXT: Final = (
    "the a to and of is it you that in for on this with was but not have are be just so "
    "what can do like about if at my we they all get one there out when up your will would "
    "how now know think time good really people some more right then could also see want "
    "make go because here any who why back way need still work even new too thanks sure "
    "yes okay maybe please help question answer bot server channel message thread code "
    "python discord error fix test deploy build release issue update config token cache "
    "model prompt reply context history poll vote lunch coffee weekend meeting tomorrow "
    "today yesterday tonight morning later soon great nice cool awesome weird broken fine "
    "idea plan docs link image file upload download screen game music movie book friend "
    "team project review merge branch commit push pull request ticket bug feature"
)
# Characters of random text generated per blast; messages are windows into it.
_BLAST_TEXT_CHARS: Final = 256 * 1024


@attrs.frozen
class SimURLs:
    """Where the simulator listens."""

    api_base: str
    gateway_url: str
    anthropic_base_url: str
    control_url: str = ""
    control_token: str = ""  # `Authorization: Bearer <token>` for the control API


@attrs.frozen
class DefaultWorld:
    """The ids of the small world `add_default_world` builds."""

    guild_id: int
    general_id: int
    random_id: int
    alice_id: int
    bob_id: int


@attrs.frozen
class BlastResult:
    """What a blast sent: frames over all connections, connections reached, seconds taken."""

    frames: int
    connections: int
    seconds: float


class Simulator:
    """A faithful Discord (REST v10 + gateway) and an offline model endpoint, on loopback.

    Args:
        token: the bot token the simulator accepts (REST `Bot <token>` and IDENTIFY);
            None: a random one per simulator, so nothing that was not shown it (a web page
            in the owner's browser, another local user) can act as the bot.
        bot_username: the bot user's name.
        heartbeat_interval_ms: the interval HELLO announces.
        enforce_heartbeat: drop a connection that misses heartbeats (session kept).
        allowed_privileged_intents: privileged intents the app may use (else close 4014).
        required_shards: a minimum shard count (else close 4011); None: any.
        limit_identify_concurrency: answer a second IDENTIFY in one `max_concurrency`
            bucket (`shard_id % max_concurrency`) within 5 s with op 9.
        max_concurrency: `session_start_limit.max_concurrency` of GET /gateway/bot.
        recommended_shards: `shards` of GET /gateway/bot; None: one per 1,000 guilds.
        rate_limits: enforce REST per-route and global limits with real 429s.
        record_deliveries: remember which gateway connection each MESSAGE_CREATE was
            handed to (`deliveries`), for a harness that tells bot processes apart.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        bot_username: str = "picortex",
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_MS,
        enforce_heartbeat: bool = True,
        allowed_privileged_intents: int = PRIVILEGED_INTENTS,
        required_shards: int | None = None,
        limit_identify_concurrency: bool = False,
        max_concurrency: int = 1,
        recommended_shards: int | None = None,
        rate_limits: bool = True,
        control_token: str | None = None,
        record_deliveries: bool = False,
    ) -> None:
        self.token = token or "sim-" + secrets.token_urlsafe(BOT_TOKEN_BYTES)
        # The control API can post as anyone (the owner included) and spend a real model
        # key in `sim --chat`: only a client that was shown this token may use it.
        self.control_token = control_token or secrets.token_urlsafe(CONTROL_TOKEN_BYTES)
        self.world = World(SnowflakeFactory(DiscordClock()), bot_username=bot_username)
        self._changed = trio.Event()
        self.gateway = GatewayHub(
            self.world,
            self.token,
            heartbeat_interval_ms=heartbeat_interval_ms,
            enforce_heartbeat=enforce_heartbeat,
            allowed_privileged_intents=allowed_privileged_intents,
            required_shards=required_shards,
            limit_identify_concurrency=limit_identify_concurrency,
            max_concurrency=max_concurrency,
            recommended_shards=recommended_shards,
            record_deliveries=record_deliveries,
            notify=self._notify,
        )
        self.limiter = RateLimiter(enabled=rate_limits)
        self.rest = DiscordRest(
            self.world,
            self.token,
            limiter=self.limiter,
            clock=trio.current_time,
            gateway_url=lambda: self.gateway.url,
            gateway_bot=self.gateway.gateway_bot,
        )
        self.model = OfflineModel(notify=self._notify)
        # Requests for attachment bodies (what a bot downloaded, and with which headers).
        self.attachment_requests: list[HttpRequest] = []
        self.urls: SimURLs | None = None

    # ------------------------------------------------------------------ serving

    async def serve(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        gateway_port: int = 0,
        task_status: trio.TaskStatus[SimURLs] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve REST, model and control on one port and the gateway on another, until cancelled."""
        async with trio.open_nursery() as nursery:
            ws_port = await nursery.start(self.gateway.serve, host, gateway_port)
            http_port = await nursery.start(serve_http, self._handle_http, host, port)
            where = f"[{host}]" if ":" in host else host
            base = f"http://{where}:{http_port}"
            self.gateway.url = f"ws://{where}:{ws_port}"
            # A distinct path, so tests can see which URL a client reconnects to.
            self.gateway.resume_url = f"ws://{where}:{ws_port}/resume"
            # Attachment bodies are served here, on the API's own origin.
            self.world.attachment_base = base
            self.urls = SimURLs(
                api_base=base + API_PREFIX,
                gateway_url=self.gateway.url,
                anthropic_base_url=base,
                control_url=base + "/_sim",
                control_token=self.control_token,
            )
            task_status.started(self.urls)

    async def _handle_http(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
            response = self.rest.handle(request)
            self._flush()
            return response
        if path == "/v1/messages":
            return await self.model.handle(request)
        if path.startswith("/attachments/"):
            return self._serve_attachment(request)
        if path == "/_sim" or path.startswith("/_sim/"):
            return await handle_control(self, request)
        return HttpResponse.json(404, {"message": "404: Not Found", "code": 0})

    def _serve_attachment(self, request: HttpRequest) -> HttpResponse:
        """GET /attachments/{channel}/{attachment}/{filename}, as Discord's CDN serves it."""
        self.attachment_requests.append(request)
        parts = request.path.split("/")
        found = None
        if request.method in ("GET", "HEAD") and len(parts) >= 5 and parts[3].isdigit():
            found = self.world.attachment_body(int(parts[3]))
        if found is None:
            return HttpResponse(404, b"Not Found", (("Content-Type", "text/plain"),))
        body, content_type = found
        headers = (("Content-Type", content_type or "application/octet-stream"),)
        return HttpResponse(200, body if request.method == "GET" else b"", headers)

    # -------------------------------------------------------------- world building

    @property
    def bot_user_id(self) -> int:
        """The bot's user id."""
        return self.world.bot_user_id

    def add_user(
        self,
        username: str,
        *,
        bot: bool = False,
        global_name: str | None = None,
        system: bool = False,
        nick: str | None = None,
    ) -> int:
        """Create a user (a member of every guild); returns its id.

        `system`: Discord's official system user; `nick`: a server nickname.
        """
        return self.world.add_user(
            username, bot=bot, global_name=global_name, system=system, nick=nick
        )

    def set_nick(self, user_id: int, nick: str | None) -> None:
        """Change a user's server nickname (seen in later messages' `member.nick`)."""
        self.world.set_nick(user_id, nick)

    def add_role(self, guild_id: int, name: str) -> int:
        """Create a role in a guild; returns its id."""
        return self.world.add_role(guild_id, name)

    def give_role(self, user_id: int, role_id: int) -> None:
        """Give a user a role (seen in later messages' and interactions' `member.roles`)."""
        self.world.give_role(user_id, role_id)

    def add_guild(self, name: str, *, owner_id: int | None = None) -> int:
        """Create a guild with the bot in it (GUILD_CREATE to connected sessions)."""
        guild_id = self.world.add_guild(name, owner_id=owner_id)
        self._flush()
        return guild_id

    def add_guilds(self, count: int, channels_per_guild: int = 2) -> list[tuple[int, list[int]]]:
        """Create `count` guilds with `channels_per_guild` text channels each, for a cluster.

        Guild ids are a millisecond apart, so `(guild_id >> 22) % num_shards` spreads them
        over shards. Returns (guild id, channel ids) per guild.
        """
        made = self.world.add_guilds(count, channels_per_guild)
        self._flush()
        return made

    def add_channel(self, guild_id: int, name: str, *, type: int = GUILD_TEXT) -> int:
        """Create a text channel (CHANNEL_CREATE to connected sessions)."""
        channel_id = self.world.add_channel(guild_id, name, type=type)
        self._flush()
        return channel_id

    def open_dm(self, user_id: int) -> int:
        """The DM channel between `user_id` and the bot."""
        return self.world.open_dm(user_id)

    def add_thread(
        self, channel_id: int, name: str, *, owner_id: int, message_id: int | None = None
    ) -> int:
        """A user starts a public thread (from `message_id` if given); returns the thread id."""
        thread = self.world.start_thread(channel_id, name, owner_id=owner_id, message_id=message_id)
        self._flush()
        return thread.id

    def add_default_world(self) -> DefaultWorld:
        """Guild "picortex-sim" with #general and #random, and users alice and bob."""
        alice = self.add_user("alice", global_name="Alice")
        bob = self.add_user("bob", global_name="Bob")
        guild = self.add_guild("picortex-sim", owner_id=alice)
        general = self.add_channel(guild, "general")
        random = self.add_channel(guild, "random")
        return DefaultWorld(guild, general, random, alice, bob)

    # ----------------------------------------------------------------- users act

    def post_user_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        mentions: Iterable[int] = (),
        reply_to: int | None = None,
        attachments: Sequence[str | Mapping[str, Any]] = (),
        reply_ping: bool = True,
        embeds: Sequence[Mapping[str, Any]] = (),
        poll: Mapping[str, Any] | None = None,
        stickers: Sequence[str] = (),
    ) -> Json:
        """A user posts a message (MESSAGE_CREATE); returns the payload as dispatched.

        `<@id>` tokens in `content` mention users as on Discord; `mentions` adds ids on top.
        A reply mentions the replied-to author unless `reply_ping` is False. `poll` is a poll
        create request (`{"question": {"text": ...}, "answers": [{"poll_media": {"text":
        ...}}]}`); `stickers` are sticker names.
        """
        if author_id == self.world.bot_user_id:
            raise SimError("the bot posts through the REST API, not post_user_message")
        message = self.world.create_message(
            channel_id,
            author_id,
            content,
            mentions=mentions,
            reply_to=reply_to,
            reply_ping=reply_ping,
            attachments=attachments,
            embeds=embeds,
            poll=poll,
            stickers=stickers,
        )
        self._flush()
        return self.world.message_payload(message, gateway=True)

    def forward_message(
        self, channel_id: int, author_id: int, source_channel_id: int, source_message_id: int
    ) -> Json:
        """A user forwards a message (MESSAGE_CREATE with `message_snapshots`)."""
        message = self.world.forward_message(
            channel_id, author_id, source_channel_id, source_message_id
        )
        self._flush()
        return self.world.message_payload(message, gateway=True)

    def delete_messages_bulk(self, channel_id: int, message_ids: Sequence[int]) -> None:
        """A moderator purges messages (MESSAGE_DELETE_BULK)."""
        self.world.delete_messages_bulk(channel_id, message_ids)
        self._flush()

    def delete_channel(self, channel_id: int) -> None:
        """Delete a channel (CHANNEL_DELETE) or a thread (THREAD_DELETE)."""
        self.world.delete_channel(channel_id)
        self._flush()

    def run_slash(
        self, channel_id: int, user_id: int, line: str, *, autocomplete: str | None = None
    ) -> SimInteraction:
        """A user runs a registered slash command (INTERACTION_CREATE), e.g.
        `picortex attention mode:silent`; with `autocomplete`, types into that option."""
        interaction = self.rest.interactions.run(
            channel_id, user_id, line, autocomplete=autocomplete
        )
        self._flush()
        return interaction

    def app_commands(self, guild_id: int | None = None) -> list[Json]:
        """The application commands registered globally, or in one guild."""
        return self.rest.interactions.registered(self.world.application_id, guild_id)

    async def wait_answered(self, interaction: SimInteraction, kinds: int = 1) -> None:
        """Until the bot has sent `kinds` answers (response, edits, follow-ups) to it."""
        await self.wait_until(lambda: len(interaction.answers) >= kinds)

    def edit_message(self, channel_id: int, message_id: int, content: str) -> Json:
        """Edit a message's content (MESSAGE_UPDATE); returns the payload as dispatched."""
        message = self.world.edit_message(channel_id, message_id, content)
        self._flush()
        return self.world.message_payload(message, gateway=True)

    def delete_message(self, channel_id: int, message_id: int) -> None:
        """Delete a message (MESSAGE_DELETE)."""
        self.world.delete_message(channel_id, message_id)
        self._flush()

    def add_reaction(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> None:
        """`user_id` reacts with `emoji` (unicode, or `name:id`) (MESSAGE_REACTION_ADD)."""
        self.world.add_reaction(channel_id, message_id, user_id, emoji)
        self._flush()

    def remove_reaction(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> None:
        """`user_id` removes a reaction (MESSAGE_REACTION_REMOVE)."""
        self.world.remove_reaction(channel_id, message_id, user_id, emoji)
        self._flush()

    # ------------------------------------------------------------------- reading

    def messages(self, channel_id: int) -> list[Json]:
        """Every message in a channel, oldest first (REST shape)."""
        channel = self.world.channel(channel_id)
        return [self.world.message_payload(m, gateway=False) for m in channel.messages]

    def bot_messages(self, channel_id: int | None = None) -> list[Json]:
        """Messages the bot posted (in one channel, or everywhere), oldest first."""
        bot = self.world.bot_user_id
        if channel_id is not None:
            found = [m for m in self.world.channel(channel_id).messages if m.author_id == bot]
        else:
            found = [
                m
                for channel in self.world.channels.values()
                for m in channel.messages
                if m.author_id == bot
            ]
            found.sort(key=lambda m: m.id)
        return [self.world.message_payload(m, gateway=False) for m in found]

    def message(self, channel_id: int, message_id: int) -> Json:
        """One message (REST shape)."""
        return self.world.message_payload(self.world.message(channel_id, message_id), gateway=False)

    def channel(self, channel_id: int) -> Json:
        """One channel object."""
        return self.world.channel_payload(self.world.channel(channel_id))

    def threads(self) -> list[Json]:
        """Every thread, oldest first (channel objects)."""
        found = [c for c in self.world.channels.values() if c.is_thread]
        found.sort(key=lambda c: c.id)
        return [self.world.channel_payload(c) for c in found]

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every Discord API request received, in order (clear it freely)."""
        return self.rest.requests

    @property
    def gateway_stats(self) -> GatewayStats:
        """A snapshot of gateway counters."""
        return self.gateway.stats()

    def deliveries(self, message_id: int) -> list[Delivery]:
        """The gateway connections a message's MESSAGE_CREATE was handed to, in order (a
        resume replays it on the new connection); needs `record_deliveries`."""
        if self.gateway.deliveries is None:
            raise SimError("deliveries are recorded only with record_deliveries=True")
        return list(self.gateway.deliveries.get(message_id, ()))

    @property
    def global_stats(self) -> GlobalStats:
        """Requests against the global limit: per second, the most in any second, global 429s."""
        return self.limiter.global_stats()

    def global_stats_since(self, since: float) -> GlobalStats:
        """The same, counting only requests from `since` (trio's clock) on."""
        return self.limiter.global_stats(since)

    @property
    def invalid_requests(self) -> int:
        """Requests that Discord counts as invalid (401, 403, and 429 not of shared scope)."""
        return self.rest.invalid_requests

    # ---------------------------------------------------------------- waiting

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` is true; it is rechecked after every simulator change."""
        while not predicate():
            await self._changed.wait()

    async def changed(self) -> None:
        """Wait for the next simulator change (for a waiter that also watches something else)."""
        await self._changed.wait()

    async def wait_ready(self, count: int = 1) -> None:
        """Wait until `count` sessions have been identified (or resumed) and are connected."""
        await self.wait_until(lambda: self.gateway.stats().ready_sessions >= count)

    async def wait_bot_messages(self, count: int = 1, channel_id: int | None = None) -> list[Json]:
        """Wait until the bot has posted `count` messages (there, or anywhere); returns them."""
        await self.wait_until(lambda: len(self.bot_messages(channel_id)) >= count)
        return self.bot_messages(channel_id)

    # ------------------------------------------------------------------- faults

    def drop_connections(self) -> None:
        """Close every gateway TCP connection abruptly; sessions stay resumable."""
        self.gateway.drop_connections()

    def send_reconnect(self, *, close_after: float | None = 5.0) -> None:
        """Send op 7 to every client (and drop the socket `close_after` s later if still open)."""
        self.gateway.send_reconnect(close_after=close_after)

    def invalidate_session(self, resumable: bool, shard: int | None = None) -> None:
        """Send op 9 (to shard id `shard`'s session only, when given); `resumable=False` ends
        the sessions (a resume then gets op 9 d=false)."""
        self.gateway.invalidate_session(resumable, shard)

    def close_connections(self, code: int, reason: str | None = None) -> None:
        """Close every gateway connection with `code` (non-resumable codes end the sessions)."""
        self.gateway.close_connections(code, reason)

    def set_heartbeat_ack(self, enabled: bool) -> None:
        """Answer heartbeats with op 11 or not (not: a client should see a zombie)."""
        self.gateway.heartbeat_ack = enabled

    def request_heartbeat(self) -> None:
        """Send op 1 to every client (each must heartbeat at once)."""
        self.gateway.request_heartbeat()

    def hold_events(self, enabled: bool) -> None:
        """While held, dispatches are recorded for replay but not sent; releasing sends them."""
        if enabled:
            self.gateway.hold = True
        else:
            self.gateway.release_held()

    def inject_rest_error(
        self,
        method: str,
        path_pattern: str,
        status: int,
        *,
        retry_after: float | None = None,
        global_: bool = False,
        scope: str | None = None,
        count: int | None = 1,
        code: int | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next `count` matching requests with `status` instead of serving them.

        `method` is an HTTP method or "*"; `path_pattern` a glob on the path relative to the
        API base (`/channels/*/messages`). A 429 carries Discord's body and headers and holds
        the bucket (or, with `global_`, every request) for `retry_after` seconds (default 1).
        `count=None` repeats until `clear_rest_errors`.
        """
        self.rest.inject(
            InjectedError(
                method, path_pattern, status, retry_after, global_, scope, code, message, count
            )
        )

    def clear_rest_errors(self) -> None:
        """Forget injected REST errors."""
        self.rest.injected.clear()

    def set_rate_limit(self, bucket: str, limit: int, per: float) -> None:
        """Change a REST route group's limit (e.g. `messages.post`, `reactions.me`)."""
        self.rest.set_rate_limit(bucket, limit, per)

    # --------------------------------------------------------------------- bench

    async def blast(
        self, count: int, channels: int | Sequence[int] = 50, size: int = 1024
    ) -> BlastResult:
        """Send `count` MESSAGE_CREATE frames of about `size` bytes to every connected session.

        Spread over `channels` (ids, or a number of `bench-N` channels made in the first guild).
        Frames are pre-built and go through sequence numbers and the replay buffer like any
        dispatch, but the messages are not stored in channel history.
        """
        channel_ids = self._bench_channels(channels)
        guild_ids = {self.world.channel(c).guild_id for c in channel_ids}
        if len(guild_ids) != 1 or None in guild_ids:
            raise SimError("blast channels must all be text channels of one guild")
        guild_id = guild_ids.pop()
        assert guild_id is not None
        author = self._bench_author()
        bodies = self._bench_bodies(count, channel_ids, guild_id, author, size)
        connections = len(self.gateway.live_sessions())
        started = time.perf_counter()
        frames = await self.gateway.blast(bodies, guild_id=guild_id, intent=INTENT_GUILD_MESSAGES)
        self._notify()
        return BlastResult(frames, connections, time.perf_counter() - started)

    def _bench_channels(self, channels: int | Sequence[int]) -> list[int]:
        if not isinstance(channels, int):
            return [int(c) for c in channels]
        if not self.world.guilds:
            self.add_guild("bench")
        guild = next(iter(self.world.guilds.values()))
        existing = [
            c for c in guild.channel_ids if (self.world.channels[c].name or "").startswith("bench-")
        ]
        while len(existing) < channels:
            existing.append(self.add_channel(guild.id, f"bench-{len(existing)}"))
        return existing[:channels]

    def _bench_author(self) -> int:
        for user in self.world.users.values():
            if user.username == BENCH_AUTHOR:
                return user.id
        return self.add_user(BENCH_AUTHOR, global_name="Bench User")

    def _bench_bodies(
        self, count: int, channel_ids: list[int], guild_id: int, author: int, size: int
    ) -> list[bytes]:
        author_payload = self.world.user_payload(author)
        member = self.world.member_payload(author, with_user=False)
        ids = self.world.snowflakes.many(count)

        def build(message_id: int, channel_id: int, content: str) -> bytes:
            return orjson.dumps(
                {
                    "type": 0,
                    "tts": False,
                    "timestamp": iso_timestamp(snowflake_ms(message_id)),
                    "pinned": False,
                    "mentions": [],
                    "mention_roles": [],
                    "mention_everyone": False,
                    "member": member,
                    "id": str(message_id),
                    "flags": 0,
                    "embeds": [],
                    "edited_timestamp": None,
                    "content": content,
                    "components": [],
                    "channel_id": str(channel_id),
                    "author": author_payload,
                    "attachments": [],
                    "guild_id": str(guild_id),
                    "nonce": str(message_id),
                }
            )

        base = len(build(ids[0] if ids else 0, channel_ids[0], ""))
        room = max(size - base, 16)
        rng = random.Random(count)  # deterministic: the same blast builds the same frames
        words = _WORD_TEXT.split()
        text_words: list[str] = []
        length = 0
        while length < _BLAST_TEXT_CHARS:
            word = rng.choice(words)
            text_words.append(word)
            length += len(word) + 1
        text = " ".join(text_words)
        limit = max(len(text) - room, 1)
        bodies = []
        for index, message_id in enumerate(ids):
            start = rng.randrange(limit)
            content = text[start : start + room].strip()
            bodies.append(build(message_id, channel_ids[index % len(channel_ids)], content))
        return bodies

    # ----------------------------------------------------------------- internals

    def _flush(self) -> None:
        outbox = self.world.outbox
        if outbox:
            self.world.outbox = []
            for event in outbox:
                self.gateway.dispatch(event)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
