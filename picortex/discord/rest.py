"""Discord REST over keep-alive connections, kept inside Discord's rate limits (SPEC 4).

Per-route buckets keyed by `X-RateLimit-Bucket` and the major parameter, the global limit
kept proactively, 429s waited out and resent, 5xx retried a bounded number of times, and a
guard that stops well before Discord's invalid-request ban.

    PicortexError
    +-- DiscordHTTPError            Discord answered with an error we do not retry
    |   +-- InvalidRequestGuardError  we refuse to send: too many invalid requests lately
    +-- FatalDiscordError           HTTP 401: the token is bad; every later request is refused
    +-- AttachmentRefused           an attachment body we would not or could not fetch
"""

from __future__ import annotations

import collections
import logging
import math
import random
import secrets
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote

import httpx
import orjson
import trio

from picortex import PROJECT_URL, __version__
from picortex.core import attachments
from picortex.discord.http import Answer, HttpxSender, PoolSender, Sender, SendFailed
from picortex.errors import FatalDiscordError, PicortexError
from picortex.net.http11 import proxy_configured
from picortex.types import EventSink

logger = logging.getLogger(__name__)

USER_AGENT: Final = f"DiscordBot ({PROJECT_URL}, {__version__})"
# Discord's documented global limit for a bot: 50 requests in any one second.
GLOBAL_LIMIT: Final = 50
GLOBAL_WINDOW: Final = 1.0
# What we allow ourselves of it: headroom for what our clock cannot see (clock granularity,
# a proxy's own counting) costs 4% of the rate and keeps us clear of a global 429.
GLOBAL_BUDGET: Final = 48
# Discord bans an IP for a while after 10,000 invalid requests (401, 403, 429) in 10 minutes.
INVALID_WINDOW: Final = 600.0
# Refuse to send well before the ban: a bot that has burned 8,000 is broken, not busy.
INVALID_REFUSE_AT: Final = 8_000
# Say so loudly long before refusing, while someone can still fix the cause.
INVALID_WARN_AT: Final = 1_000
# A 5xx may be a blip on Discord's side; three tries over about 3.5 s rides one out.
MAX_SERVER_RETRIES: Final = 3
SERVER_BACKOFF_BASE: Final = 0.5
# A 429 means the request was not processed, so resending is safe; a route that keeps
# answering 429 after this many waits is broken and the caller should hear about it.
MAX_RATE_LIMIT_RETRIES: Final = 5
# A 429 without a usable retry_after (a proxy or Cloudflare page) still needs a pause.
DEFAULT_RETRY_AFTER: Final = 5.0
# Headers that report remaining > 0 but no reset time: assume Discord's usual short window.
DEFAULT_RESET_AFTER: Final = 1.0
# Two responses whose reset times differ by less than this describe the same window.
SAME_WINDOW_SLACK: Final = 0.25
# Discord answers in well under a second; a minute-long stall is a dead connection.
REQUEST_TIMEOUT: Final = 30.0
# An attachment body comes from Discord's CDN in well under this; a stalled one is dropped.
ATTACHMENT_TIMEOUT: Final = 15.0
# Attachment downloads are a handful per answer; a small pool is plenty.
ATTACHMENT_CONNECTIONS: Final = 8
# Drop idle buckets once this many exist, so a bot in many channels does not grow forever.
MAX_BUCKETS: Final = 4_096
# The default for replies (SPEC 4): users may be pinged, the replied-to author too, never
# @everyone, @here or a role.
REPLY_ALLOWED_MENTIONS: Final[Mapping[str, Any]] = {"parse": ("users",), "replied_user": True}
PLAIN_ALLOWED_MENTIONS: Final[Mapping[str, Any]] = {"parse": ("users",)}
_NEVER_PARSED: Final = frozenset({"everyone", "roles"})
_MAJOR_PARAMETERS: Final = ("channels", "guilds", "webhooks")


class DiscordHTTPError(PicortexError):
    """Discord answered with an error status that is not retried.

    Attributes:
        status: the HTTP status (0 when no answer arrived at all).
        code: Discord's JSON error code, when the body had one.
        message: Discord's message, or a short description of what went wrong.
    """

    def __init__(self, status: int, code: int | None, message: str) -> None:
        suffix = f" (code {code})" if code is not None else ""
        super().__init__(f"Discord HTTP {status}{suffix}: {message}")
        self.status = status
        self.code = code
        self.message = message


class AttachmentRefused(PicortexError):
    """An attachment body was not fetched: a host that is not Discord's, too large, or a
    failed download. The message is one short sentence for the prompt's file list."""


class InvalidRequestGuardError(DiscordHTTPError):
    """Refused locally: too many 401/403/429 answers in the last ten minutes."""

    def __init__(self, message: str) -> None:
        super().__init__(0, None, message)
        self.args = (message,)


class _NoSink:
    def emit(self, event: str, /, **fields: object) -> None:
        """Drop the event."""


class _Bucket:
    """One rate-limit bucket: a route's bucket hash together with one major parameter.

    A bucket starts as "not yet seen" (limit 1), so one request goes out and its response
    tells us the real limit. `remaining - outgoing` is what may still be sent now.
    """

    __slots__ = ("changed", "limit", "outgoing", "remaining", "reset_at")

    def __init__(self) -> None:
        self.limit = 1
        self.remaining = 1
        self.reset_at: float | None = None
        self.outgoing = 0
        self.changed = trio.Event()

    def notify(self) -> None:
        """Wake every task waiting on this bucket."""
        self.changed.set()
        self.changed = trio.Event()

    def refresh(self, now: float) -> None:
        """Refill the bucket once its window has passed."""
        if self.reset_at is not None and now >= self.reset_at:
            self.remaining = self.limit
            self.reset_at = None
        elif self.reset_at is None and self.remaining <= 0 and self.outgoing == 0:
            # Nothing will ever refill it (no reset time known): let one request probe.
            self.remaining = 1

    def update(self, headers: Mapping[str, str], now: float) -> None:
        """Take the limit, remaining count and reset time from a response's headers."""
        try:
            remaining = int(headers["x-ratelimit-remaining"])
        except (KeyError, ValueError):
            return
        try:
            reset_at = now + max(0.0, float(headers["x-ratelimit-reset-after"]))
        except (KeyError, ValueError):
            reset_at = now + DEFAULT_RESET_AFTER
        try:
            self.limit = max(1, int(headers["x-ratelimit-limit"]))
        except (KeyError, ValueError):
            self.limit = max(self.limit, remaining, 1)
        if self.reset_at is None or reset_at > self.reset_at + SAME_WINDOW_SLACK:
            # A new window: the server's count is the truth.
            self.remaining = remaining
            self.reset_at = reset_at
        else:
            # The same window, answers possibly out of order: keep the lower count.
            self.remaining = min(self.remaining, remaining)
            self.reset_at = max(self.reset_at, reset_at)

    def block_until(self, until: float) -> None:
        """Send nothing more on this bucket before `until` (after a 429)."""
        self.remaining = 0
        self.reset_at = until if self.reset_at is None else max(self.reset_at, until)

    @property
    def idle(self) -> bool:
        """True when nothing is in flight and no window is pending."""
        return self.outgoing == 0 and self.reset_at is None


class RestClient:
    """The Discord REST API for the bot, over keep-alive connections (see `discord.http`).

    Use it as an async context manager; it closes its connections, but never an httpx
    client passed in. Every method may raise DiscordHTTPError (not retried), FatalDiscordError
    (HTTP 401; every later request is refused too) or InvalidRequestGuardError.
    """

    def __init__(
        self,
        api_base: str,
        token: str,
        *,
        client: httpx.AsyncClient | None = None,
        events: EventSink | None = None,
    ) -> None:
        self._api_base = api_base.rstrip("/")
        # Kept only in this header; never in an error, an event or a log line.
        self._headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
        self._sender: Sender
        if client is not None:
            self._sender = HttpxSender(client, owned=False)
        elif proxy_configured():
            self._sender = HttpxSender(httpx.AsyncClient(timeout=REQUEST_TIMEOUT), owned=True)
        else:
            self._sender = PoolSender(REQUEST_TIMEOUT)
        self._events: EventSink = events if events is not None else _NoSink()
        # Attachment bodies come from Discord's CDN, never with the bot token; over the
        # client handed in, else one opened on first use.
        self._cdn_client: httpx.AsyncClient | None = client
        self._cdn_owned = False
        # Route ("METHOD /template") -> bucket hash; None: the route answered without one.
        self._route_bucket: dict[str, str | None] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        # The global limiter counts a request from when it is sent until GLOBAL_WINDOW after
        # its answer: Discord counts it when it arrives, some time in between.
        self._answered: collections.deque[float] = collections.deque()
        self._global_in_flight = 0
        self._global_freed = trio.Event()
        self._global_until = -math.inf
        self._invalid: collections.deque[float] = collections.deque()
        self._invalid_warned = False
        self._fatal = False
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections this RestClient opened (never a client handed in)."""
        self._closed = True
        await self._sender.aclose()
        if self._cdn_owned and self._cdn_client is not None:
            await self._cdn_client.aclose()

    # ---- endpoints -------------------------------------------------------------------------

    async def create_message(
        self,
        channel_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        allowed_mentions: Mapping[str, Any] | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]:
        """Post a message; with `reply_to`, as a reply to that message in the same channel.

        `allowed_mentions` may narrow the default (users, and the replied-to author) but
        never widens it: @everyone, @here and roles are always stripped. The message carries
        a nonce Discord enforces, so a resend after a 5xx cannot post it twice.
        """
        body: dict[str, Any] = {
            "content": content,
            "allowed_mentions": _safe_allowed_mentions(
                allowed_mentions, reply=reply_to is not None
            ),
            # Up to 25 characters; Discord returns the existing message for a repeated nonce.
            "nonce": nonce if nonce is not None else secrets.token_hex(12),
            "enforce_nonce": True,
        }
        if reply_to is not None:
            # If the trigger was deleted meanwhile, the answer is still posted, unreferenced.
            body["message_reference"] = {"message_id": str(reply_to), "fail_if_not_exists": False}
        result = await self._request(
            "POST", "/channels/{channel_id}/messages", f"/channels/{channel_id}/messages", body
        )
        return _as_object(result)

    async def edit_message(
        self,
        channel_id: int,
        message_id: int,
        content: str,
        *,
        allowed_mentions: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Change the content of one of the bot's own messages (a streamed reply growing).

        Mentions are narrowed as for `create_message`; a reply's ping is never renewed.
        """
        body = {
            "content": content,
            "allowed_mentions": _safe_allowed_mentions(allowed_mentions, reply=False),
        }
        result = await self._request(
            "PATCH",
            "/channels/{channel_id}/messages/{message_id}",
            f"/channels/{channel_id}/messages/{message_id}",
            body,
        )
        return _as_object(result)

    async def download_attachment(
        self, url: str, *, max_bytes: int, timeout: float = ATTACHMENT_TIMEOUT
    ) -> bytes:
        """The body of a message attachment, read up to `max_bytes`.

        Only Discord's attachment hosts (https) and the API base's own origin are asked;
        redirects are not followed; the bot token is never sent.

        Raises:
            AttachmentRefused: the host is not allowed, the body is larger than
                `max_bytes`, or the download failed or took longer than `timeout`.
        """
        if not attachments.url_allowed(url, self._api_base):
            raise AttachmentRefused("not on Discord's attachment hosts")
        client = self._cdn()
        chunks: list[bytes] = []
        size = 0
        try:
            with trio.fail_after(timeout):
                async with client.stream(
                    "GET", url, headers={"User-Agent": USER_AGENT}, follow_redirects=False
                ) as response:
                    if response.status_code != 200:
                        raise AttachmentRefused(f"download answered HTTP {response.status_code}")
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise AttachmentRefused("too large")
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise AttachmentRefused("too large")
                        chunks.append(chunk)
        except trio.TooSlowError:
            raise AttachmentRefused("download timed out") from None
        except httpx.HTTPError as exc:
            raise AttachmentRefused(f"download failed ({type(exc).__name__})") from None
        return b"".join(chunks)

    def _cdn(self) -> httpx.AsyncClient:
        if self._cdn_client is None:
            self._cdn_client = httpx.AsyncClient(
                timeout=httpx.Timeout(ATTACHMENT_TIMEOUT),
                limits=httpx.Limits(
                    max_connections=ATTACHMENT_CONNECTIONS,
                    max_keepalive_connections=ATTACHMENT_CONNECTIONS,
                ),
                follow_redirects=False,
            )
            self._cdn_owned = True
        return self._cdn_client

    async def start_thread_from_message(
        self, channel_id: int, message_id: int, name: str
    ) -> dict[str, Any]:
        """Start a public thread from a message; returns the thread's channel object."""
        result = await self._request(
            "POST",
            "/channels/{channel_id}/messages/{message_id}/threads",
            f"/channels/{channel_id}/messages/{message_id}/threads",
            {"name": name[:100] or "thread"},
        )
        return _as_object(result)

    async def create_dm(self, user_id: int) -> dict[str, Any]:
        """Open (or find) the DM channel with a user; returns the channel object."""
        result = await self._request(
            "POST", "/users/@me/channels", "/users/@me/channels", {"recipient_id": str(user_id)}
        )
        return _as_object(result)

    async def get_channel_messages(
        self,
        channel_id: int,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Up to `limit` (1-100) messages of a channel, newest first, as Discord sends them."""
        if after is not None and before is not None:
            raise ValueError("after and before are mutually exclusive")
        params = {"limit": str(min(100, max(1, limit)))}
        if after is not None:
            params["after"] = str(after)
        if before is not None:
            params["before"] = str(before)
        result = await self._request(
            "GET",
            "/channels/{channel_id}/messages",
            f"/channels/{channel_id}/messages",
            params=params,
        )
        return _as_list(result)

    async def trigger_typing(
        self, channel_id: int, *, on_sent: Callable[[], None] | None = None
    ) -> None:
        """Show the typing indicator in a channel (Discord clears it after about 10 s).

        Cosmetic, so it never waits for the global limit: when that is used up, the
        indicator is skipped and the slot left to the answers. `on_sent` is called when
        the request is on its way to Discord.
        """
        await self._request(
            "POST",
            "/channels/{channel_id}/typing",
            f"/channels/{channel_id}/typing",
            optional=True,
            on_sent=on_sent,
        )

    async def add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        """React to a message as the bot; `emoji` is unicode or `name:id` for a custom one."""
        await self._request(
            "PUT",
            "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
            f"/channels/{channel_id}/messages/{message_id}/reactions/{_emoji(emoji)}/@me",
        )

    async def remove_own_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        """Remove the bot's own reaction from a message."""
        await self._request(
            "DELETE",
            "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
            f"/channels/{channel_id}/messages/{message_id}/reactions/{_emoji(emoji)}/@me",
        )

    async def get_reactions(
        self,
        channel_id: int,
        message_id: int,
        emoji: str,
        *,
        after: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The users (user objects) who reacted to a message with `emoji`."""
        params = {"limit": str(min(100, max(1, limit)))}
        if after is not None:
            params["after"] = str(after)
        result = await self._request(
            "GET",
            "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}",
            f"/channels/{channel_id}/messages/{message_id}/reactions/{_emoji(emoji)}",
            params=params,
        )
        return _as_list(result)

    async def get_gateway_bot(self) -> dict[str, Any]:
        """The gateway URL, recommended shards and session start limits."""
        return _as_object(await self._request("GET", "/gateway/bot", "/gateway/bot"))

    async def get_current_user(self) -> dict[str, Any]:
        """The bot's own user object."""
        return _as_object(await self._request("GET", "/users/@me", "/users/@me"))

    async def get_channel(self, channel_id: int) -> dict[str, Any]:
        """A channel or thread object."""
        result = await self._request("GET", "/channels/{channel_id}", f"/channels/{channel_id}")
        return _as_object(result)

    # ---- the request loop --------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        template: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, str] | None = None,
        optional: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> Any:
        """Send one request, honouring every limit; retry 429s and 5xx as SPEC 4 says.

        An `optional` request is dropped (None) rather than wait for the global limit.
        """
        route = f"{method} {template}"
        major = _major_parameter(path)
        url = self._api_base + path
        headers = self._headers
        content: bytes | None = None
        if body is not None:
            content = orjson.dumps(body)
            headers = {**headers, "Content-Type": "application/json"}
        server_failures = 0
        rate_limited = 0
        failure = ""
        while True:
            self._check_allowed()
            bucket = await self._acquire(route, major)
            response: Answer | None = None
            slot = False
            try:
                if not optional:
                    await self._global_slot()
                elif not self._take_global_slot():
                    return None  # the bucket reservation is returned below
                slot = True
                self._check_allowed()
                response = await self._sender.send(method, url, headers, content, params, on_sent)
            except SendFailed as exc:
                failure = f"no answer from Discord ({exc})"
            finally:
                if slot:
                    self._global_release()
                self._release(bucket, route, major, response)
            if response is None:
                # No answer: Discord may or may not have seen it. Resending is safe because
                # every endpoint here is idempotent or carries an enforced nonce.
                server_failures += 1
                if server_failures > MAX_SERVER_RETRIES:
                    self._events.emit("rest", outcome="error", route=route, status=0)
                    raise DiscordHTTPError(0, None, failure)
                await self._backoff(route, 0, server_failures)
                continue
            status = response.status_code
            if status < 300:
                return _json_body(response)
            if status == 429:
                rate_limited += 1
                await self._on_rate_limited(response, route, major, rate_limited)
                continue
            if status >= 500:
                server_failures += 1
                if server_failures <= MAX_SERVER_RETRIES:
                    await self._backoff(route, status, server_failures)
                    continue
            self._raise_for(response, route)

    async def _backoff(self, route: str, status: int, attempt: int) -> None:
        delay = SERVER_BACKOFF_BASE * 2 ** (attempt - 1) * (1.0 + random.random() * 0.1)
        logger.warning(
            "Discord %s answered %s; retry %d of %d in %.1f s",
            route,
            status or "nothing",
            attempt,
            MAX_SERVER_RETRIES,
            delay,
        )
        self._events.emit("rest", outcome="retry", route=route, status=status, attempt=attempt)
        await trio.sleep(delay)

    async def _on_rate_limited(self, response: Answer, route: str, major: str, count: int) -> None:
        """Pause what the 429 names (the route's bucket, or everything) for retry_after."""
        now = trio.current_time()
        data = _json_object(response)
        scope = response.headers.get("x-ratelimit-scope", "")
        retry_after = _retry_after(data, response.headers)
        is_global = (
            data.get("global") is True
            or response.headers.get("x-ratelimit-global", "").lower() == "true"
            or scope == "global"
            # Not Discord's JSON and no scope: a proxy or Cloudflare, which limits all of us.
            or (not data and scope not in ("user", "shared"))
        )
        if scope != "shared":
            # Shared-resource limits are not counted against us by Discord (rate-limits doc).
            self._count_invalid(now)
        until = now + retry_after
        if is_global:
            self._global_until = max(self._global_until, until)
        else:
            bucket = self._bucket_of(route, major)
            if bucket is not None:
                bucket.block_until(until)
        logger.warning(
            "Discord rate-limited %s (scope %s%s): waiting %.2f s",
            route,
            scope or "unknown",
            ", global" if is_global else "",
            retry_after,
        )
        self._events.emit(
            "rest",
            outcome="rate_limited",
            route=route,
            scope=scope or None,
            is_global=is_global,
            retry_after=retry_after,
        )
        if count > MAX_RATE_LIMIT_RETRIES:
            raise DiscordHTTPError(
                429, _error_code(data), f"still rate-limited after {count} waits"
            )
        await trio.sleep_until(until)

    def _raise_for(self, response: Answer, route: str) -> None:
        status = response.status_code
        data = _json_object(response)
        code = _error_code(data)
        message = data.get("message")
        text = message if isinstance(message, str) else response.reason_phrase or "error"
        self._events.emit("rest", outcome="error", route=route, status=status, code=code)
        if status in (401, 403):
            self._count_invalid(trio.current_time())
        if status == 401:
            self._fatal = True
            logger.debug("Discord answered 401 Unauthorized: the bot token is invalid")
            raise FatalDiscordError(
                "Discord answered 401 Unauthorized: the bot token is invalid or was reset; "
                "no further requests are sent"
            )
        raise DiscordHTTPError(status, code, text)

    # ---- limits ------------------------------------------------------------------------------

    def _check_allowed(self) -> None:
        if self._closed:
            raise DiscordHTTPError(0, None, "the REST client is closed")
        if self._fatal:
            raise FatalDiscordError(
                "an earlier 401 Unauthorized stopped all Discord requests: the bot token is invalid"
            )
        self._prune_invalid(trio.current_time())
        if len(self._invalid) >= INVALID_REFUSE_AT:
            raise InvalidRequestGuardError(
                f"refusing to send: {len(self._invalid)} invalid requests (401/403/429) in the "
                f"last {INVALID_WINDOW / 60:.0f} minutes, and Discord bans at 10,000",
            )

    def _prune_invalid(self, now: float) -> None:
        horizon = now - INVALID_WINDOW
        invalid = self._invalid
        while invalid and invalid[0] <= horizon:
            invalid.popleft()

    def _count_invalid(self, now: float) -> None:
        self._invalid.append(now)
        self._prune_invalid(now)
        count = len(self._invalid)
        if count >= INVALID_WARN_AT and not self._invalid_warned:
            self._invalid_warned = True
            logger.warning(
                "%d invalid Discord requests in the last %.0f minutes; requests stop at %d",
                count,
                INVALID_WINDOW / 60,
                INVALID_REFUSE_AT,
            )
            self._events.emit("rest", outcome="invalid_requests", count=count)
        elif count < INVALID_WARN_AT // 2:
            self._invalid_warned = False

    def invalid_request_count(self) -> int:
        """401/403/429 answers counted in the rolling ten-minute window."""
        self._prune_invalid(trio.current_time())
        return len(self._invalid)

    def _bucket_key(self, route: str, major: str) -> tuple[str, str] | None:
        try:
            bucket_hash = self._route_bucket[route]
        except KeyError:
            # Not yet seen: a placeholder bucket per route lets one request learn the hash.
            return ("?" + route, major)
        if bucket_hash is None:
            return None
        return (bucket_hash, major)

    def _bucket_of(self, route: str, major: str) -> _Bucket | None:
        key = self._bucket_key(route, major)
        if key is None:
            return None
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune_buckets()
            bucket = self._buckets[key] = _Bucket()
        return bucket

    def _prune_buckets(self) -> None:
        now = trio.current_time()
        for key, bucket in list(self._buckets.items()):
            bucket.refresh(now)
            if bucket.idle and bucket.remaining >= bucket.limit:
                del self._buckets[key]

    async def _acquire(self, route: str, major: str) -> _Bucket | None:
        """Wait until the route's bucket has room, then reserve one request on it."""
        while True:
            bucket = self._bucket_of(route, major)
            if bucket is None:
                return None
            bucket.refresh(trio.current_time())
            if bucket.remaining - bucket.outgoing > 0:
                bucket.outgoing += 1
                return bucket
            # Wait for the window to reset, or for a response to teach us more, then look
            # again: the route may have been mapped to its real bucket meanwhile.
            deadline = bucket.reset_at if bucket.reset_at is not None else math.inf
            with trio.move_on_at(deadline):
                await bucket.changed.wait()

    def _release(
        self, bucket: _Bucket | None, route: str, major: str, response: Answer | None
    ) -> None:
        """Return a reservation and learn what the response says about the route's limits."""
        if bucket is not None:
            bucket.outgoing -= 1
        if response is not None:
            bucket_hash = response.headers.get("x-ratelimit-bucket")
            if bucket_hash is not None:
                self._route_bucket[route] = bucket_hash
                target = self._bucket_of(route, major)
                assert target is not None
                target.update(response.headers, trio.current_time())
                if target is not bucket:
                    target.notify()
                    if bucket is not None and bucket.outgoing == 0:
                        self._buckets.pop(("?" + route, major), None)
            elif response.status_code < 300 and route not in self._route_bucket:
                # A success without rate-limit headers: the route has no per-route limit.
                self._route_bucket[route] = None
                self._buckets.pop(("?" + route, major), None)
        if bucket is not None:
            bucket.notify()

    async def _global_slot(self) -> None:
        """Wait until sending keeps us under the global limit in any one second, then take a
        slot.

        Discord counts a request when it arrives, which is after we send it and before its
        answer comes back. So a request holds its slot while in flight and for GLOBAL_WINDOW
        after its answer: a new request then arrives at least GLOBAL_WINDOW after every
        request it is not counted with, whatever the network's delays.
        """
        answered = self._answered
        while True:
            now = trio.current_time()
            if now < self._global_until:
                await trio.sleep_until(self._global_until)
                continue
            if self._take_global_slot():
                return
            # Full: the oldest answer leaves the window, or an answer comes back and its
            # slot starts its last second.
            deadline = answered[0] + GLOBAL_WINDOW if answered else math.inf
            with trio.move_on_at(deadline):
                await self._global_freed.wait()

    def _take_global_slot(self) -> bool:
        """Take a global slot if one is free right now (and no global 429 is pending)."""
        now = trio.current_time()
        if now < self._global_until:
            return False
        answered = self._answered
        # The same sum as `_global_slot`'s deadline, so waking at it always frees the slot.
        while answered and answered[0] + GLOBAL_WINDOW <= now:
            answered.popleft()
        if self._global_in_flight + len(answered) < GLOBAL_BUDGET:
            self._global_in_flight += 1
            return True
        return False

    def _global_release(self) -> None:
        """A request's answer (or failure) is in: its slot lasts one more GLOBAL_WINDOW."""
        self._global_in_flight -= 1
        if not self._answered:
            # Waiters had no expiry to wait for; with answers queued they already have one.
            self._global_freed.set()
            self._global_freed = trio.Event()
        self._answered.append(trio.current_time())


# ---- helpers ---------------------------------------------------------------------------------


def _major_parameter(path: str) -> str:
    """The top-level resource of a path: `channels/ID`, `guilds/ID` or `webhooks/ID[/token]`."""
    parts = path.split("/", 4)
    # parts[0] is "" (the path starts with "/").
    if len(parts) >= 3 and parts[1] in _MAJOR_PARAMETERS:
        if parts[1] == "webhooks" and len(parts) >= 4:
            return f"webhooks/{parts[2]}/{parts[3]}"
        return f"{parts[1]}/{parts[2]}"
    return ""


def _emoji(emoji: str) -> str:
    """URL-encode an emoji for a reaction path (`name:id` keeps its colon)."""
    return quote(emoji, safe=":")


def _safe_allowed_mentions(requested: Mapping[str, Any] | None, *, reply: bool) -> dict[str, Any]:
    """The caller's allowed_mentions with @everyone, @here and roles always removed."""
    if requested is None:
        return dict(REPLY_ALLOWED_MENTIONS if reply else PLAIN_ALLOWED_MENTIONS)
    safe: dict[str, Any] = {}
    parse = requested.get("parse")
    if parse is not None:
        safe["parse"] = [p for p in parse if p not in _NEVER_PARSED]
    users = requested.get("users")
    if users is not None and "users" not in safe.get("parse", ()):
        # Discord rejects `users` alongside parse=["users"]; the list is only kept alone.
        safe["users"] = [str(u) for u in users]
    if "parse" not in safe and "users" not in safe:
        safe["parse"] = []
    if reply:
        safe["replied_user"] = bool(requested.get("replied_user", False))
    return safe


def _json_body(response: Answer) -> Any:
    if not response.content:
        return None
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise DiscordHTTPError(response.status_code, None, "Discord's answer is not JSON") from None


def _json_object(response: Answer) -> dict[str, Any]:
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _error_code(data: Mapping[str, Any]) -> int | None:
    code = data.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _retry_after(data: Mapping[str, Any], headers: Mapping[str, str]) -> float:
    value = data.get("retry_after")
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return DEFAULT_RETRY_AFTER


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DiscordHTTPError(200, None, "expected a JSON object in Discord's answer")
    return value


def _as_list(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DiscordHTTPError(200, None, "expected a JSON array in Discord's answer")
    return value
