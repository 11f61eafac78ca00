"""Discord REST over one httpx client, kept inside Discord's rate limits (SPEC 4).

Per-route buckets keyed by `X-RateLimit-Bucket` and the major parameter, the global limit
kept proactively, 429s waited out and resent, 5xx retried a bounded number of times, and a
guard that stops well before Discord's invalid-request ban. The counting is in
`discord.ratelimit`; this module waits and sends. Errors (see `picortex.errors`):
DiscordHTTPError, InvalidRequestGuardError, FatalDiscordError.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self
from urllib.parse import quote

import httpx
import orjson
import trio

from picortex import PROJECT_URL, __version__
from picortex.core import attachments
from picortex.discord.fence import check_fence
from picortex.discord.http import Once, discord_client, sent_trace, task_on_sent
from picortex.discord.ratelimit import (
    GLOBAL_BUDGET,
    GLOBAL_LIMIT,
    GLOBAL_WINDOW,
    INVALID_REFUSE_AT,
    INVALID_WARN_AT,
    INVALID_WINDOW,
    PACED_PREFETCH,
    PREFETCH_LOOKAHEAD,
    Bucket,
    Buckets,
    GlobalLimit,
    GlobalWaiter,
    InvalidRequests,
    is_global_429,
    major_parameter,
    retry_after,
)
from picortex.errors import (
    AttachmentRefused,
    DiscordHTTPError,
    FatalDiscordError,
    InvalidRequestGuardError,
)
from picortex.types import EventSink

if TYPE_CHECKING:
    from picortex.discord.shared_limits import GlobalSlots

logger = logging.getLogger(__name__)

__all__ = [
    "GLOBAL_BUDGET",
    "GLOBAL_LIMIT",
    "GLOBAL_WINDOW",
    "INVALID_REFUSE_AT",
    "INVALID_WARN_AT",
    "INVALID_WINDOW",
    "MAX_SERVER_RETRIES",
    "SERVER_BACKOFF_BASE",
    "DiscordHTTPError",
    "FatalDiscordError",
    "InvalidRequestGuardError",
    "RestClient",
]

USER_AGENT: Final = f"DiscordBot ({PROJECT_URL}, {__version__})"
# A 5xx may be a blip on Discord's side; three tries over about 3.5 s rides one out.
MAX_SERVER_RETRIES: Final = 3
SERVER_BACKOFF_BASE: Final = 0.5
# The default for replies (SPEC 4): users may be pinged, the replied-to author too, never
# @everyone, @here or a role.
REPLY_ALLOWED_MENTIONS: Final[Mapping[str, Any]] = {"parse": ("users",), "replied_user": True}
PLAIN_ALLOWED_MENTIONS: Final[Mapping[str, Any]] = {"parse": ("users",)}
_NEVER_PARSED: Final = frozenset({"everyone", "roles"})
# An attachment body comes from Discord's CDN in well under this; a stalled one is dropped.
ATTACHMENT_TIMEOUT: Final = 15.0
# The placeholder of an interaction token in a route: routes, never paths, are logged.
INTERACTION_TOKEN: Final = "{interaction_token}"  # noqa: S105 (a placeholder)


class _NoSink:
    def emit(self, event: str, /, **fields: object) -> None:
        """Drop the event."""


class RestClient:
    """The Discord REST API for the bot, over one httpx AsyncClient (see `discord.http`).

    Use it as an async context manager; it closes the client it made, but never an httpx
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
        shared: GlobalSlots | None = None,
    ) -> None:
        """`shared`: the global limit of a cluster of processes (SPEC 17), taken as well."""
        self._api_base = api_base.rstrip("/")
        # Kept only in this header; never in an error, an event or a log line.
        self._headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
        self._owned = client is None
        self._http = client if client is not None else discord_client()
        self._events: EventSink = events if events is not None else _NoSink()
        self._buckets = Buckets()
        # Tasks waiting for a bucket to change; an entry lives only while someone waits.
        self._bucket_changed: dict[Bucket, trio.Event] = {}
        self._global = GlobalLimit()
        self._global_freed = trio.Event()
        # Foreground requests waiting for a global slot, in arrival order (`_global_slot`).
        self._foreground_line = trio.Lock()
        self._shared = shared
        self._invalid = InvalidRequests()
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
        """Close the client this RestClient made (never a client handed in)."""
        self._closed = True
        if self._owned:
            await self._http.aclose()

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
        """The body of a message attachment, read up to `max_bytes`, over the same client.

        Only Discord's attachment hosts (https) and the API base's own origin are asked;
        redirects are not followed; the bot token is never sent.

        Raises:
            AttachmentRefused: the host is not allowed, the body is larger than
                `max_bytes`, or the download failed or took longer than `timeout`.
        """
        if not attachments.url_allowed(url, self._api_base):
            raise AttachmentRefused("not on Discord's attachment hosts")
        chunks: list[bytes] = []
        size = 0
        try:
            with trio.fail_after(timeout):
                request = self._http.build_request("GET", url, headers={"User-Agent": USER_AGENT})
                response = await self._http.send(request, stream=True, follow_redirects=False)
                try:
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
                finally:
                    await response.aclose()
        except trio.TooSlowError:
            raise AttachmentRefused("download timed out") from None
        except httpx.HTTPError as exc:
            raise AttachmentRefused(f"download failed ({type(exc).__name__})") from None
        return b"".join(chunks)

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
        background: bool = False,
    ) -> list[dict[str, Any]]:
        """Up to `limit` (1-100) messages of a channel, newest first, as Discord sends them.

        A `background` read (catch-up's) gives way to answers within the global limit.
        """
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
            background=background,
        )
        return _as_list(result)

    def expect(self, count: int) -> None:
        """`count` requests bound by the global limit go in a moment (an answer's typing
        indicator and reply): a process of a cluster asks the shared table for their slots
        now, so none waits a round trip when it goes. Nothing to do without a cluster."""
        if self._shared is not None:
            self._shared.expect(count)

    async def trigger_typing(
        self,
        channel_id: int,
        *,
        on_sent: Callable[[], None] | None = None,
        read_after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Show the typing indicator in a channel (Discord clears it after about 10 s).

        Cosmetic, so it never waits for the global limit: when that is used up, the
        indicator is skipped and the slot left to the answers. `on_sent` is called when
        the request is on its way to Discord; with `read_after`, Discord's answer is read
        only once that returns.
        """
        await self._request(
            "POST",
            "/channels/{channel_id}/typing",
            f"/channels/{channel_id}/typing",
            optional=True,
            on_sent=on_sent,
            read_after=read_after,
        )

    async def add_reaction(self, channel_id: int, message_id: int, emoji: str) -> None:
        """React to a message as the bot; `emoji` is unicode or `name:id` for a custom one."""
        await self._request(
            "PUT",
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

    # ---- application commands and interactions (SPEC 15) ----------------------------------

    async def bulk_overwrite_global_commands(
        self, application_id: int, commands: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Replace every global application command of the application with `commands`."""
        result = await self._request(
            "PUT",
            "/applications/{application_id}/commands",
            f"/applications/{application_id}/commands",
            commands,
        )
        return _as_list(result)

    async def bulk_overwrite_guild_commands(
        self, application_id: int, guild_id: int, commands: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Replace the application's commands in one guild with `commands`."""
        result = await self._request(
            "PUT",
            "/applications/{application_id}/guilds/{guild_id}/commands",
            f"/applications/{application_id}/guilds/{guild_id}/commands",
            commands,
        )
        return _as_list(result)

    async def create_interaction_response(
        self, interaction_id: int, token: str, response: dict[str, Any]
    ) -> None:
        """The initial response to an interaction (due within 3 s of its creation)."""
        await self._request(
            "POST",
            "/interactions/{interaction_id}/{interaction_token}/callback",
            f"/interactions/{interaction_id}/{_token(token)}/callback",
            response,
        )

    async def edit_original_interaction_response(
        self, application_id: int, token: str, message: dict[str, Any]
    ) -> dict[str, Any]:
        """Edit the interaction's first response (a deferred one gets its content here)."""
        result = await self._request(
            "PATCH",
            "/webhooks/{application_id}/{interaction_token}/messages/@original",
            f"/webhooks/{application_id}/{_token(token)}/messages/@original",
            message,
        )
        return _as_object(result)

    async def get_original_interaction_response(
        self, application_id: int, token: str
    ) -> dict[str, Any]:
        """The interaction's first response as a message object."""
        result = await self._request(
            "GET",
            "/webhooks/{application_id}/{interaction_token}/messages/@original",
            f"/webhooks/{application_id}/{_token(token)}/messages/@original",
        )
        return _as_object(result)

    async def edit_followup_message(
        self, application_id: int, token: str, message_id: int, message: dict[str, Any]
    ) -> dict[str, Any]:
        """Edit one follow-up message of an interaction (a streamed answer growing)."""
        result = await self._request(
            "PATCH",
            "/webhooks/{application_id}/{interaction_token}/messages/{message_id}",
            f"/webhooks/{application_id}/{_token(token)}/messages/{message_id}",
            message,
        )
        return _as_object(result)

    async def create_followup_message(
        self, application_id: int, token: str, message: dict[str, Any]
    ) -> dict[str, Any]:
        """Another message answering the interaction (valid for 15 minutes)."""
        result = await self._request(
            "POST",
            "/webhooks/{application_id}/{interaction_token}",
            f"/webhooks/{application_id}/{_token(token)}",
            message,
            params={"wait": "true"},
        )
        return _as_object(result)

    # ---- the request loop --------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        template: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        params: Mapping[str, str] | None = None,
        optional: bool = False,
        background: bool = False,
        on_sent: Callable[[], None] | None = None,
        read_after: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """Send one request, honouring every limit; retry 429s and 5xx as SPEC 4 says.

        An `optional` request is dropped (None) rather than wait for the global limit; a
        `background` one waits in the global limit's background lane (`discord.ratelimit`).
        `on_sent` (else the task's `http.when_sent` callback) is called once it is written;
        the response is read once `read_after` (if given) returns.
        """
        route = f"{method} {template}"
        major = major_parameter(path)
        url = self._api_base + path
        headers = self._headers
        content: bytes | None = None
        if body is not None:
            content = orjson.dumps(body)
            headers = {**headers, "Content-Type": "application/json"}
        if on_sent is None:
            on_sent = task_on_sent()
        if on_sent is None and read_after is not None:
            on_sent = _nothing
        sent = Once(on_sent) if on_sent is not None else None
        extensions = sent_trace(sent, read_after) if sent is not None else None
        server_failures = 0
        rate_limited = 0
        failure = ""
        while True:
            self._check_allowed()
            bucket = await self._acquire(route, major)
            response: httpx.Response | None = None
            slot = False
            shared_slot: GlobalSlots | None = None  # taken: asked to refill once it is over
            try:
                # Interaction endpoints are not bound by the global limit (Discord's docs):
                # a slash command's answer never waits behind other requests for it.
                if INTERACTION_TOKEN not in template:
                    if not optional:
                        await self._global_slot(background)
                    elif not self._global.try_take(trio.current_time(), optional=True):
                        return None  # the bucket reservation is returned below
                    slot = True
                    # The cluster's slot too. An optional request goes only if one is free.
                    shared = self._shared
                    if shared is not None:
                        busy = self._global.busy(trio.current_time())
                        if not await shared.take(wait=not optional, busy=busy):
                            return None
                        shared_slot = shared
                self._check_allowed()
                # The last moment: a request of a shard no longer held never leaves (SPEC 17).
                check_fence()
                response = await self._http.request(
                    method,
                    url,
                    content=content,
                    params=params,
                    headers=headers,
                    extensions=extensions,
                )
            except httpx.RequestError as exc:
                # The message names the failure, never the URL's query or our headers.
                failure = f"no answer from Discord ({type(exc).__name__}: {exc})"
            finally:
                if slot:
                    self._global_release()
                if shared_slot is not None:
                    shared_slot.refill()
                self._release(bucket, route, major, response)
            if sent is not None:
                # An answer (or a failure) proves the request is over; say so if the
                # transport never traced the send.
                sent()
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

    async def _on_rate_limited(
        self, response: httpx.Response, route: str, major: str, count: int
    ) -> None:
        """Pause what the 429 names (the route's bucket, or everything) for retry_after."""
        now = trio.current_time()
        data = _json_object(response)
        scope = response.headers.get("x-ratelimit-scope", "")
        wait = retry_after(data, response.headers)
        is_global = is_global_429(data, response.headers)
        if scope != "shared":
            # Shared-resource limits are not counted against us by Discord (rate-limits doc).
            self._count_invalid(now)
        until = now + wait
        if is_global:
            self._global.block_until(until)
            if self._shared is not None:
                self._shared.pause(wait)  # every process of the cluster
        else:
            bucket = self._buckets.get(route, major, now)
            if bucket is not None:
                bucket.block_until(until)
        logger.warning(
            "Discord rate-limited %s (scope %s%s): waiting %.2f s",
            route,
            scope or "unknown",
            ", global" if is_global else "",
            wait,
        )
        self._events.emit(
            "rest",
            outcome="rate_limited",
            route=route,
            scope=scope or None,
            is_global=is_global,
            retry_after=wait,
            attempt=count,
        )
        # A 429 means the request was not processed, so resending is safe however many come
        # (SPEC 4: an answer is never dropped for 429s); only the invalid-request guard, which
        # counts every one of them, stops the wait-and-resend loop.
        await trio.sleep_until(until)

    def _raise_for(self, response: httpx.Response, route: str) -> None:
        status = response.status_code
        data = _json_object(response)
        code = _error_code(data)
        message = data.get("message")
        text = message if isinstance(message, str) else response.reason_phrase or "error"
        self._events.emit("rest", outcome="error", route=route, status=status, code=code)
        if status in (401, 403):
            self._count_invalid(trio.current_time())
        if status == 401 and INTERACTION_TOKEN in route:
            # An expired or unknown interaction token: that interaction only, not our bot token.
            raise DiscordHTTPError(status, code, text)
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
        now = trio.current_time()
        if self._invalid.refused(now):
            raise InvalidRequestGuardError(
                f"refusing to send: {self._invalid.count(now)} invalid requests (401/403/429) "
                f"in the last {INVALID_WINDOW / 60:.0f} minutes, and Discord bans at 10,000",
            )

    def _count_invalid(self, now: float) -> None:
        crossed = self._invalid.record(now)
        if crossed is not None:
            logger.warning(
                "%d invalid Discord requests in the last %.0f minutes; requests stop at %d",
                crossed,
                INVALID_WINDOW / 60,
                INVALID_REFUSE_AT,
            )
            self._events.emit("rest", outcome="invalid_requests", count=crossed)

    def invalid_request_count(self) -> int:
        """401/403/429 answers counted in the rolling ten-minute window."""
        return self._invalid.count(trio.current_time())

    def _notify(self, bucket: Bucket) -> None:
        """Wake every task waiting on `bucket`."""
        event = self._bucket_changed.pop(bucket, None)
        if event is not None:
            event.set()

    async def _acquire(self, route: str, major: str) -> Bucket | None:
        """Wait until the route's bucket has room, then reserve one request on it."""
        while True:
            now = trio.current_time()
            bucket = self._buckets.get(route, major, now)
            if bucket is None:
                return None
            if bucket.try_reserve(now):
                return bucket
            # Wait for the window to reset, or for a response to teach us more, then look
            # again: the route may have been mapped to its real bucket meanwhile.
            deadline = bucket.reset_at if bucket.reset_at is not None else float("inf")
            changed = self._bucket_changed.setdefault(bucket, trio.Event())
            with trio.move_on_at(deadline):
                await changed.wait()

    def _release(
        self, bucket: Bucket | None, route: str, major: str, response: httpx.Response | None
    ) -> None:
        """Return a reservation and learn what the response says about the route's limits."""
        if bucket is not None:
            bucket.outgoing -= 1
        if response is not None:
            # httpx's Headers look a name up case-insensitively by scanning; a dict once is
            # cheaper than the five lookups below (names come lower-cased from `items`).
            headers = dict(response.headers.items())
            moved = self._buckets.learn(
                route, major, bucket, response.status_code, headers, trio.current_time()
            )
            if moved is not None:
                self._notify(moved)
        if bucket is not None:
            self._notify(bucket)

    async def hold_slot_for_answer(self) -> None:
        """Wait for the global limit's background lane, then hold a slot for an answer.

        Catch-up calls it before handing a missed trigger over, so the answers it causes are
        paced by what the foreground leaves free instead of crowding out live answers. The
        next foreground request takes the held slot, or it is given back unused after
        `ratelimit.HELD_SLOT_SECONDS`.
        """
        await self._global_slot(background=True, hold=True)

    async def _global_slot(self, background: bool, *, hold: bool = False) -> None:
        """Wait until sending keeps us under the global limit, then take a slot (`hold`:
        hold one for an answer about to be made instead, see `hold_slot_for_answer`).

        Foreground requests that must wait queue in line and only the first looks at the
        limit: a burst of hundreds of answers would otherwise all wake for every slot
        that frees, and the loop time spent so delays the answers that free the next.
        """
        limit = self._global
        now = trio.current_time()
        line = self._foreground_line
        if not background and not line.locked() and limit.try_take(now):
            return
        # Registered at once: a waiting foreground request holds the background lane back
        # (and a background one's patience counts from here).
        waiter = limit.wait(now, background=background)
        try:
            if background:
                await self._wait_global(waiter, hold=hold)
            else:
                async with line:
                    await self._wait_global(waiter, hold=False)
        finally:
            if limit.leave(waiter, trio.current_time()):
                self._wake_global()

    async def _wait_global(self, waiter: GlobalWaiter, *, hold: bool) -> None:
        limit = self._global
        while True:
            now = trio.current_time()
            if now < limit.blocked_until:
                await trio.sleep_until(limit.blocked_until)
                continue
            taken = limit.hold(now, waiter) if hold else limit.try_take(now, waiter)
            if taken:
                return
            # Full, or not our lane's turn: the oldest answer leaves the window, an answer
            # comes back and its slot starts its last second, a waiter ahead leaves, or
            # (background) our patience ends.
            chance = limit.next_chance(waiter, now)
            if self._shared is not None:
                chance = self._ask_cluster_ahead(now, chance)
            with trio.move_on_at(chance):
                await self._global_freed.wait()

    def _ask_cluster_ahead(self, now: float, chance: float) -> float:
        """When to look again, a little before `chance` so that the cluster's slots for the
        requests about to go are asked for while our own slots are still busy."""
        ahead = chance - PREFETCH_LOOKAHEAD
        if now < ahead:
            return ahead
        limit = self._global
        soon = min(limit.freeing_by(max(chance, now + PREFETCH_LOOKAHEAD)), limit.waiting)
        if limit.busy(now):
            soon = min(soon, PACED_PREFETCH)
        if soon > 0 and self._shared is not None:
            self._shared.prefetch(soon)
        return chance

    def _global_release(self) -> None:
        """A request's answer (or failure) is in: its slot lasts one more GLOBAL_WINDOW."""
        if self._global.release(trio.current_time()):
            # Waiters had no expiry to wait for; with answers queued they already have one.
            self._wake_global()

    def _wake_global(self) -> None:
        """Wake every task waiting for a global slot to look again."""
        self._global_freed.set()
        self._global_freed = trio.Event()


# ---- helpers ---------------------------------------------------------------------------------


def _nothing() -> None:
    """A request-written callback for a caller that only wants its answer read later."""


def _token(token: str) -> str:
    """An interaction token as one path segment (they are base64url, so normally unchanged)."""
    return quote(token, safe="")


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


def _json_body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise DiscordHTTPError(response.status_code, None, "Discord's answer is not JSON") from None


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _error_code(data: Mapping[str, Any]) -> int | None:
    code = data.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DiscordHTTPError(200, None, "expected a JSON object in Discord's answer")
    return value


def _as_list(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DiscordHTTPError(200, None, "expected a JSON array in Discord's answer")
    return value
