"""Discord's REST API v10 as the simulator serves it under `/api/v10`.

Routing, bot-token auth, rate-limit headers and real 429s (ratelimit.py), injected faults,
request recording, and the endpoints a bot uses. Discord semantics live in world.py; this
module turns HTTP requests into world calls and world errors into Discord's error JSON.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import unquote

import attrs
import orjson

from picortex.sim.httpserver import HttpRequest, HttpResponse
from picortex.sim.interactions import SimInteractions
from picortex.sim.ratelimit import RateLimiter, RouteLimit, Verdict, bucket_hash
from picortex.sim.world import (
    MAX_CONTENT_CHARS,
    ApiError,
    Json,
    SimMessage,
    World,
    form_error,
    parse_emoji,
)

API_PREFIX: Final = "/api/v10"
# Discord caps a message at 20 distinct reaction emoji.
MAX_REACTION_EMOJI: Final = 20
# The sim's per-route limits (Discord's are not published; these are typical observed ones).
WRITE_LIMIT: Final = RouteLimit(5, 5.0)
READ_LIMIT: Final = RouteLimit(5, 1.0)
REACTION_LIMIT: Final = RouteLimit(1, 0.25)
LOOSE_LIMIT: Final = RouteLimit(50, 1.0)
# `enforce_nonce` checks a nonce for uniqueness "in the past few minutes" (Discord's docs).
NONCE_WINDOW_SECONDS: Final = 300.0


@attrs.frozen
class RecordedRequest:
    """One request the simulator's Discord API received.

    `path` is relative to the API base and still percent-encoded, as sent
    (`/channels/1/messages/2/reactions/%F0%9F%91%8D/@me`); `at` is trio's clock.
    """

    method: str
    path: str
    query: Mapping[str, str]
    json: Any
    headers: Mapping[str, str]
    status: int
    at: float = 0.0


@attrs.define
class InjectedError:
    """A fault to answer instead of serving matching requests, `count` times (None: forever)."""

    method: str
    path_pattern: str
    status: int
    retry_after: float | None = None
    global_: bool = False
    scope: str | None = None
    code: int | None = None
    message: str | None = None
    count: int | None = 1

    def matches(self, method: str, path: str) -> bool:
        """True when this fault applies to `method path` (glob pattern on the path)."""
        if self.method != "*" and self.method.upper() != method:
            return False
        return fnmatch.fnmatchcase(path, self.path_pattern)


@attrs.frozen
class _Route:
    method: str
    pattern: tuple[str, ...]
    bucket: str
    limit: RouteLimit
    handler: str
    auth: bool = True
    # Interaction endpoints are not bound to the bot's global limit (Discord's rate-limit docs).
    global_limit: bool = True


_ROUTES: Final = (
    _Route("GET", ("users", "@me"), "users/@me", LOOSE_LIMIT, "get_me"),
    _Route("GET", ("oauth2", "applications", "@me"), "applications/@me", LOOSE_LIMIT, "get_app"),
    _Route("GET", ("gateway",), "gateway", LOOSE_LIMIT, "get_gateway", auth=False),
    _Route("GET", ("gateway", "bot"), "gateway/bot", LOOSE_LIMIT, "get_gateway_bot"),
    _Route("POST", ("users", "@me", "channels"), "users/@me/channels", WRITE_LIMIT, "create_dm"),
    _Route("GET", ("channels", "{channel}"), "channels", READ_LIMIT, "get_channel"),
    _Route("POST", ("channels", "{channel}", "typing"), "typing", WRITE_LIMIT, "typing"),
    _Route(
        "GET", ("channels", "{channel}", "messages"), "messages.get", READ_LIMIT, "get_messages"
    ),
    _Route(
        "POST",
        ("channels", "{channel}", "messages"),
        "messages.post",
        WRITE_LIMIT,
        "create_message",
    ),
    _Route(
        "GET",
        ("channels", "{channel}", "messages", "{message}"),
        "message.get",
        READ_LIMIT,
        "get_message",
    ),
    _Route(
        "PATCH",
        ("channels", "{channel}", "messages", "{message}"),
        "message.patch",
        WRITE_LIMIT,
        "edit_message",
    ),
    _Route(
        "DELETE",
        ("channels", "{channel}", "messages", "{message}"),
        "message.delete",
        WRITE_LIMIT,
        "delete_message",
    ),
    _Route(
        "POST",
        ("channels", "{channel}", "messages", "{message}", "threads"),
        "threads",
        WRITE_LIMIT,
        "start_thread",
    ),
    # Adding and removing one's own reaction share one bucket, as on Discord.
    _Route(
        "PUT",
        ("channels", "{channel}", "messages", "{message}", "reactions", "{emoji}", "@me"),
        "reactions.me",
        REACTION_LIMIT,
        "add_reaction",
    ),
    _Route(
        "DELETE",
        ("channels", "{channel}", "messages", "{message}", "reactions", "{emoji}", "@me"),
        "reactions.me",
        REACTION_LIMIT,
        "remove_reaction",
    ),
    _Route(
        "GET",
        ("channels", "{channel}", "messages", "{message}", "reactions", "{emoji}"),
        "reactions.get",
        READ_LIMIT,
        "get_reactions",
    ),
    # Application commands (bulk overwrite, list) and interaction responses.
    _Route("GET", ("applications", "{app}", "commands"), "commands", READ_LIMIT, "get_commands"),
    _Route("PUT", ("applications", "{app}", "commands"), "commands", WRITE_LIMIT, "put_commands"),
    _Route(
        "GET",
        ("applications", "{app}", "guilds", "{guild}", "commands"),
        "guild.commands",
        READ_LIMIT,
        "get_commands",
    ),
    _Route(
        "PUT",
        ("applications", "{app}", "guilds", "{guild}", "commands"),
        "guild.commands",
        WRITE_LIMIT,
        "put_commands",
    ),
    # Interaction routes are authorized by their token, not the bot's.
    _Route(
        "POST",
        ("interactions", "{interaction}", "{token}", "callback"),
        "interaction.callback",
        LOOSE_LIMIT,
        "interaction_callback",
        auth=False,
        global_limit=False,
    ),
    _Route(
        "GET",
        ("webhooks", "{app}", "{token}", "messages", "@original"),
        "webhook.original",
        LOOSE_LIMIT,
        "get_original",
        auth=False,
        global_limit=False,
    ),
    _Route(
        "PATCH",
        ("webhooks", "{app}", "{token}", "messages", "@original"),
        "webhook.original",
        WRITE_LIMIT,
        "edit_original",
        auth=False,
        global_limit=False,
    ),
    _Route(
        "POST",
        ("webhooks", "{app}", "{token}"),
        "webhook.followup",
        WRITE_LIMIT,
        "followup",
        auth=False,
        global_limit=False,
    ),
    # After @original: a literal segment is matched before a placeholder.
    _Route(
        "PATCH",
        ("webhooks", "{app}", "{token}", "messages", "{message}"),
        "webhook.followup",
        WRITE_LIMIT,
        "edit_followup",
        auth=False,
        global_limit=False,
    ),
)


@attrs.frozen
class _Call:
    params: dict[str, Any]
    query: Mapping[str, str]
    body: Any


class DiscordRest:
    """Serves `/api/v10/...` against a World; records requests; applies limits and faults."""

    def __init__(
        self,
        world: World,
        token: str,
        *,
        limiter: RateLimiter,
        clock: Callable[[], float],
        gateway_url: Callable[[], str],
        gateway_bot: Callable[[], Json],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.world = world
        self.token = token
        self.limiter = limiter
        self.requests: list[RecordedRequest] = []
        self.injected: list[InjectedError] = []
        self.invalid_requests = 0
        self._clock = clock
        self._wall = wall_clock
        self._gateway_url = gateway_url
        self._gateway_bot = gateway_bot
        self._limit_overrides: dict[str, RouteLimit] = {}
        # nonce -> when the bot's first message with it was created, oldest first.
        self._nonce_times: dict[str, float] = {}
        self.interactions = SimInteractions(world, clock)

    # -------------------------------------------------------------- configuration

    def set_rate_limit(self, bucket: str, limit: int, per: float) -> None:
        """Override a route group's limit (groups: see `_ROUTES`, e.g. `messages.post`)."""
        if not any(route.bucket == bucket for route in _ROUTES):
            raise ValueError(f"no REST route group named {bucket!r}")
        self._limit_overrides[bucket] = RouteLimit(limit, per)

    def inject(self, fault: InjectedError) -> None:
        """Queue a fault; the oldest matching fault answers first."""
        if fault.path_pattern.startswith(API_PREFIX + "/"):
            fault.path_pattern = fault.path_pattern[len(API_PREFIX) :]
        self.injected.append(fault)

    # ---------------------------------------------------------------- serving

    def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request whose path starts with `/api/v10`."""
        now = self._clock()
        rel = request.path[len(API_PREFIX) :] or "/"
        body: Any = None
        try:
            body = request.json()
        except orjson.JSONDecodeError:
            response = _error(ApiError(400, 50109, "The request body contains invalid JSON."))
            return self._record(request, rel, None, response, now)
        response = self._serve(request, rel, body, now)
        return self._record(request, rel, body, response, now)

    def _serve(self, request: HttpRequest, rel: str, body: Any, now: float) -> HttpResponse:
        matched = _match(request.method, rel)
        if matched is None:
            return HttpResponse.json(404, {"message": "404: Not Found", "code": 0})
        route, params = matched
        if route is None:
            return HttpResponse.json(405, {"message": "405: Method Not Allowed", "code": 0})
        if route.auth and request.headers.get("authorization") != f"Bot {self.token}":
            self.invalid_requests += 1
            return HttpResponse.json(401, {"message": "401: Unauthorized", "code": 0})
        limit = self._limit_overrides.get(route.bucket, route.limit)
        bucket = bucket_hash(route.bucket)
        major = str(params.get("channel", ""))
        fault = self._take_fault(request.method, rel)
        if fault is not None:
            if route.global_limit:
                self.limiter.count_global(now)
            return self._fault_response(fault, bucket, major, limit, now)
        verdict = self.limiter.check(bucket, major, limit, now, global_limit=route.global_limit)
        if not verdict.allowed:
            if verdict.scope != "shared":
                self.invalid_requests += 1
            return self._too_many(verdict, "You are being rate limited.")
        try:
            status, payload = getattr(self, "_" + route.handler)(_Call(params, request.query, body))
        except ApiError as exc:
            if exc.status == 403:
                self.invalid_requests += 1
            return _error(exc, self._limit_headers(verdict))
        if status == 204:
            return HttpResponse(204, b"", self._limit_headers(verdict))
        return HttpResponse.json(status, payload, self._limit_headers(verdict))

    def _record(
        self, request: HttpRequest, rel: str, body: Any, response: HttpResponse, now: float
    ) -> HttpResponse:
        self.requests.append(
            RecordedRequest(
                request.method,
                rel,
                dict(request.query),
                body,
                request.headers,
                response.status,
                now,
            )
        )
        return response

    def _take_fault(self, method: str, rel: str) -> InjectedError | None:
        for fault in self.injected:
            if fault.matches(method, rel):
                if fault.count is not None:
                    fault.count -= 1
                    if fault.count <= 0:
                        self.injected.remove(fault)
                return fault
        return None

    def _fault_response(
        self, fault: InjectedError, bucket: str, major: str, limit: RouteLimit, now: float
    ) -> HttpResponse:
        if fault.status != 429:
            message = fault.message or f"{fault.status}: {_phrase(fault.status)}"
            peek = self.limiter.peek(bucket, major, limit, now)
            return HttpResponse.json(
                fault.status,
                {"message": message, "code": fault.code or 0},
                self._limit_headers(peek),
            )
        wait = fault.retry_after if fault.retry_after is not None else 1.0
        scope = fault.scope or ("global" if fault.global_ else "user")
        # The simulated limit holds for `wait` seconds: a client retrying early gets a real 429.
        if fault.global_:
            self.limiter.lock_global(now + wait)
        else:
            self.limiter.lock(bucket, major, limit, now, now + wait, scope)
        if scope != "shared":
            self.invalid_requests += 1
        if scope == "shared":
            peek = self.limiter.peek(bucket, major, limit, now)
            verdict = Verdict(False, bucket, peek.limit, peek.remaining, wait, wait, scope)
        else:
            verdict = Verdict(False, bucket, limit.limit, 0, wait, wait, scope, fault.global_)
        message = fault.message or (
            "The resource is being rate limited."
            if scope == "shared"
            else "You are being rate limited."
        )
        return self._too_many(verdict, message)

    def _too_many(self, verdict: Verdict, message: str) -> HttpResponse:
        body: Json = {
            "message": message,
            "retry_after": round(verdict.retry_after, 3),
            "global": verdict.global_,
        }
        headers: list[tuple[str, str]] = [("Retry-After", str(math.ceil(verdict.retry_after)))]
        if verdict.global_:
            self.limiter.record_global_429(self._clock())
            headers.append(("X-RateLimit-Global", "true"))
        else:
            headers.extend(self._limit_headers(verdict))
        headers.append(("X-RateLimit-Scope", verdict.scope or "user"))
        return HttpResponse.json(429, body, tuple(headers))

    def _limit_headers(self, verdict: Verdict) -> tuple[tuple[str, str], ...]:
        reset_after = max(verdict.reset_after, 0.0)
        return (
            ("X-RateLimit-Limit", str(verdict.limit)),
            ("X-RateLimit-Remaining", str(verdict.remaining)),
            ("X-RateLimit-Reset", f"{self._wall() + reset_after:.3f}"),
            ("X-RateLimit-Reset-After", f"{reset_after:.3f}"),
            ("X-RateLimit-Bucket", verdict.bucket),
        )

    # ---------------------------------------------------------------- endpoints

    def _get_me(self, call: _Call) -> tuple[int, Any]:
        return 200, self.world.bot_user_payload()

    def _get_app(self, call: _Call) -> tuple[int, Any]:
        bot = self.world.bot_user_payload()
        return 200, {
            "id": str(self.world.application_id),
            "name": bot["username"],
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "hook": True,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            # GATEWAY_PRESENCE | GATEWAY_GUILD_MEMBERS | GATEWAY_MESSAGE_CONTENT
            "flags": (1 << 12) | (1 << 14) | (1 << 18),
            "owner": self.world.user_payload(self.world.bot_user_id),
            "team": None,
            "bot": bot,
            "interactions_endpoint_url": None,
            "role_connections_verification_url": None,
            "redirect_uris": [],
            "tags": [],
            "approximate_guild_count": len(self.world.guilds),
        }

    def _get_gateway(self, call: _Call) -> tuple[int, Any]:
        return 200, {"url": self._gateway_url()}

    def _get_gateway_bot(self, call: _Call) -> tuple[int, Any]:
        return 200, self._gateway_bot()

    def _create_dm(self, call: _Call) -> tuple[int, Any]:
        body = _object(call.body)
        recipient = _snowflake(body.get("recipient_id"), "recipient_id")
        if recipient not in self.world.users:
            raise ApiError(400, 50033, "Invalid Recipient(s)")
        channel_id = self.world.open_dm(recipient)
        return 200, self.world.channel_payload(self.world.channels[channel_id])

    def _get_channel(self, call: _Call) -> tuple[int, Any]:
        channel = self.world.channel(call.params["channel"])
        payload = self.world.channel_payload(channel)
        if channel.is_thread and channel.owner_id == self.world.bot_user_id:
            payload["member"] = {
                "id": str(channel.id),
                "user_id": str(self.world.bot_user_id),
                "join_timestamp": payload["thread_metadata"]["create_timestamp"],
                "flags": 1,
            }
        return 200, payload

    def _typing(self, call: _Call) -> tuple[int, Any]:
        self.world.typing(call.params["channel"], self.world.bot_user_id, int(self._wall()))
        return 204, None

    def _get_messages(self, call: _Call) -> tuple[int, Any]:
        channel_id = call.params["channel"]
        self.world.channel(channel_id)
        limit = _int_param(call.query, "limit", 50, 1, 100)
        anchors = {
            key: _snowflake(call.query[key], key)
            for key in ("around", "before", "after")
            if call.query.get(key)
        }
        found = self.world.history(channel_id, limit=limit, **anchors)
        return 200, [self.world.message_payload(m, gateway=False) for m in found]

    def _create_message(self, call: _Call) -> tuple[int, Any]:
        channel_id = call.params["channel"]
        self.world.channel(channel_id)
        body = _object(call.body)
        content = body.get("content")
        if content is not None and not isinstance(content, str):
            raise form_error("content", "BASE_TYPE_STRING", "Must be a string.")
        content = content or ""
        _check_length(content)
        embeds = body.get("embeds") or []
        if not content and not embeds and not body.get("sticker_ids") and not body.get("poll"):
            raise ApiError(400, 50006, "Cannot send an empty message")
        allowed = body.get("allowed_mentions")
        if allowed is not None:
            _check_allowed_mentions(_object(allowed, "allowed_mentions"))
        nonce = body.get("nonce")
        now = self._clock()
        self._forget_old_nonces(now)
        if nonce is not None and body.get("enforce_nonce") and str(nonce) in self._nonce_times:
            earlier = self.world.bot_message_for_nonce(nonce)
            if earlier is not None:
                return 200, self.world.message_payload(earlier, gateway=False)
        reply_to = self._reply_target(channel_id, body.get("message_reference"))
        message = self.world.create_message(
            channel_id,
            self.world.bot_user_id,
            content,
            reply_to=reply_to,
            embeds=embeds,
            allowed_mentions=allowed,
            nonce=nonce,
            tts=bool(body.get("tts", False)),
        )
        if nonce is not None:
            self._nonce_times.pop(str(nonce), None)
            self._nonce_times[str(nonce)] = now
        return 200, self.world.message_payload(message, gateway=False)

    def _forget_old_nonces(self, now: float) -> None:
        """Drop nonces older than the window; the dict is in creation order."""
        times = self._nonce_times
        while times:
            nonce, at = next(iter(times.items()))
            if now - at < NONCE_WINDOW_SECONDS:
                return
            del times[nonce]

    def _reply_target(self, channel_id: int, reference: Any) -> int | None:
        if reference is None:
            return None
        ref = _object(reference, "message_reference")
        target = _snowflake(ref.get("message_id"), "message_reference")
        ref_channel = ref.get("channel_id")
        same_channel = ref_channel is None or str(ref_channel) == str(channel_id)
        exists = same_channel and target in self.world.channel(channel_id).by_id
        if exists:
            return target
        if ref.get("fail_if_not_exists", True) is False:
            return None
        raise form_error(
            "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
        )

    def _get_message(self, call: _Call) -> tuple[int, Any]:
        message = self.world.message(call.params["channel"], call.params["message"])
        return 200, self.world.message_payload(message, gateway=False)

    def _edit_message(self, call: _Call) -> tuple[int, Any]:
        message = self.world.message(call.params["channel"], call.params["message"])
        if message.author_id != self.world.bot_user_id:
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        body = _object(call.body)
        content = body.get("content", message.content)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise form_error("content", "BASE_TYPE_STRING", "Must be a string.")
        _check_length(content)
        allowed = body.get("allowed_mentions")
        if allowed is not None:
            _check_allowed_mentions(_object(allowed, "allowed_mentions"))
        edited = self.world.edit_message(
            message.channel_id, message.id, content, allowed_mentions=allowed
        )
        return 200, self.world.message_payload(edited, gateway=False)

    def _delete_message(self, call: _Call) -> tuple[int, Any]:
        self.world.delete_message(call.params["channel"], call.params["message"])
        return 204, None

    def _start_thread(self, call: _Call) -> tuple[int, Any]:
        body = _object(call.body)
        name = body.get("name")
        if name is None:
            raise form_error("name", "BASE_TYPE_REQUIRED", "This field is required")
        if not isinstance(name, str):
            raise form_error("name", "BASE_TYPE_STRING", "Must be a string.")
        archive = body.get("auto_archive_duration", 1440)
        if archive not in (60, 1440, 4320, 10080):
            raise form_error(
                "auto_archive_duration",
                "BASE_TYPE_CHOICES",
                f"Value must be one of {{60, 1440, 4320, 10080}}, got {archive!r}.",
            )
        thread = self.world.start_thread(
            call.params["channel"],
            name,
            owner_id=self.world.bot_user_id,
            message_id=call.params["message"],
            auto_archive_duration=archive,
        )
        return 201, self.world.channel_payload(thread)

    def _add_reaction(self, call: _Call) -> tuple[int, Any]:
        message = self._reaction_message(call)
        emoji = call.params["emoji"]
        parse_emoji(emoji)
        if emoji not in message.reactions and len(message.reactions) >= MAX_REACTION_EMOJI:
            raise ApiError(400, 30010, "Maximum number of reactions reached (20)")
        self.world.add_reaction(message.channel_id, message.id, self.world.bot_user_id, emoji)
        return 204, None

    def _remove_reaction(self, call: _Call) -> tuple[int, Any]:
        message = self._reaction_message(call)
        emoji = call.params["emoji"]
        parse_emoji(emoji)
        self.world.remove_reaction(message.channel_id, message.id, self.world.bot_user_id, emoji)
        return 204, None

    def _get_reactions(self, call: _Call) -> tuple[int, Any]:
        message = self._reaction_message(call)
        emoji = call.params["emoji"]
        parse_emoji(emoji)
        limit = _int_param(call.query, "limit", 25, 1, 100)
        after = _snowflake(call.query["after"], "after") if call.query.get("after") else 0
        users = sorted(u for u in message.reactions.get(emoji, []) if u > after)[:limit]
        return 200, [self.world.user_payload(u) for u in users]

    def _get_commands(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.registered(call.params["app"], call.params.get("guild"))

    def _put_commands(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.overwrite(
            call.params["app"], call.params.get("guild"), call.body
        )

    def _interaction_callback(self, call: _Call) -> tuple[int, Any]:
        answer = self.interactions.callback(
            call.params["interaction"],
            call.params["token"],
            call.body,
            with_response=call.query.get("with_response", "").lower() in ("true", "1"),
        )
        return (204, None) if answer is None else (200, answer)

    def _get_original(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.original(call.params["app"], call.params["token"])

    def _edit_original(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.edit_original(
            call.params["app"], call.params["token"], call.body
        )

    def _followup(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.followup(call.params["app"], call.params["token"], call.body)

    def _edit_followup(self, call: _Call) -> tuple[int, Any]:
        return 200, self.interactions.edit_followup(
            call.params["app"], call.params["token"], call.params["message"], call.body
        )

    def _reaction_message(self, call: _Call) -> SimMessage:
        return self.world.message(call.params["channel"], call.params["message"])


def _match(method: str, rel: str) -> tuple[_Route | None, dict[str, Any]] | None:
    """(route, params) for the path; (None, {}) when only the method is wrong; None if unknown."""
    segments = tuple(unquote(s) for s in rel.strip("/").split("/"))
    path_known = False
    for route in _ROUTES:
        params = _match_pattern(route.pattern, segments)
        if params is None:
            continue
        path_known = True
        if route.method == method:
            return route, params
    return (None, {}) if path_known else None


def _match_pattern(pattern: tuple[str, ...], segments: tuple[str, ...]) -> dict[str, Any] | None:
    if len(pattern) != len(segments):
        return None
    params: dict[str, Any] = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{"):
            name = want[1:-1]
            if name in ("emoji", "token"):
                params[name] = got
            elif got.isdigit():
                params[name] = int(got)
            else:
                return None
        elif want != got:
            return None
    return params


def _error(exc: ApiError, headers: tuple[tuple[str, str], ...] = ()) -> HttpResponse:
    return HttpResponse.json(exc.status, exc.body(), headers)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _object(value: Any, field: str | None = None) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if field is None:
        raise ApiError(400, 50109, "The request body contains invalid JSON.")
    raise form_error(field, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")


def _snowflake(value: Any, field: str) -> int:
    text = str(value) if value is not None else ""
    if not text.isdigit():
        raise form_error(field, "NUMBER_TYPE_COERCE", f'Value "{text}" is not snowflake.')
    return int(text)


def _int_param(query: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise form_error(key, "NUMBER_TYPE_COERCE", f'Value "{raw}" is not int.') from None
    if value < low:
        raise form_error(
            key, "NUMBER_TYPE_MIN", f"int value should be greater than or equal to {low}."
        )
    if value > high:
        raise form_error(
            key, "NUMBER_TYPE_MAX", f"int value should be less than or equal to {high}."
        )
    return value


def _check_length(content: str) -> None:
    if len(content) > MAX_CONTENT_CHARS:
        raise form_error(
            "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT_CHARS} or fewer in length."
        )


def _check_allowed_mentions(allowed: Mapping[str, Any]) -> None:
    parse = allowed.get("parse") or []
    if not isinstance(parse, list) or any(p not in ("users", "roles", "everyone") for p in parse):
        raise form_error(
            "allowed_mentions", "MESSAGE_ALLOWED_MENTIONS_PARSE_INVALID", "Invalid parse value."
        )
    for kind in ("users", "roles"):
        if kind in parse and allowed.get(kind):
            raise form_error(
                "allowed_mentions",
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                f'parse:["{kind}"] and {kind}: [ids...] are mutually exclusive.',
            )
