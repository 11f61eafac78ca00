"""The simulator's HTTP control API under `/_sim/`, for benches and terminals in other processes.

JSON in, JSON out. Every request carries `Authorization: Bearer <control token>` (the
token is random per simulator and printed at start), and a request with a body must say
`Content-Type: application/json`: a web page can neither guess the token nor send either
header cross-origin without a preflight this API never grants. Routes:

    GET  /_sim/state                         world summary (ids, names, token)
    POST /_sim/users {username, bot?, system?, nick?} -> {id}
    POST /_sim/nick {user_id, nick}          server nickname (null: none)
    POST /_sim/guilds {name}                 -> {id}
    POST /_sim/guilds/bulk {count, channels_per_guild?}
                                             -> {guilds: [{id, channel_ids}]}
    POST /_sim/channels {guild_id, name}     -> {id}
    POST /_sim/dms {user_id}                 -> {id}
    POST /_sim/messages {channel_id, author_id | author, content, mentions?, reply_to?,
                         attachments?, poll?, stickers?} -> the message as dispatched
    POST /_sim/forward {channel_id, author_id | author, source_channel_id, source_message_id}
                                             -> the forward (message_snapshots) as dispatched
    POST /_sim/delete-bulk {channel_id, message_ids}   MESSAGE_DELETE_BULK
    POST /_sim/delete-channel {channel_id}   CHANNEL_DELETE, or THREAD_DELETE for a thread
    GET  /_sim/messages?channel_id=&after=&bot=1&wait=SECONDS
                                             -> messages oldest first; `wait` long-polls
    POST /_sim/edit {channel_id, message_id, content}
    POST /_sim/delete {channel_id, message_id}
    POST /_sim/reactions {channel_id, message_id, user_id, emoji, remove?}
    GET  /_sim/requests                      recorded Discord API requests
    GET  /_sim/stats                         gateway counters, request counts, and the
                                             global limit's (`global`: per_second,
                                             max_in_any_second, global_429s)
    POST /_sim/faults/drop | /faults/heartbeat_request
    POST /_sim/faults/reconnect {close_after?}
    POST /_sim/faults/invalidate {resumable}
    POST /_sim/faults/close {code, reason?}
    POST /_sim/faults/heartbeat_ack {enabled}
    POST /_sim/faults/hold {enabled}
    POST /_sim/faults/rest_error {method, path_pattern, status, retry_after?, global?,
                                  scope?, count?, code?, message?}
    POST /_sim/faults/rest_errors/clear
    POST /_sim/blast {count, channels?, size?} -> {frames, connections, seconds}
    POST /_sim/model/script {replies: [text | {text?, status?, delay?, ...}]}
    GET  /_sim/model/calls
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import trio

from picortex.errors import PicortexError
from picortex.sim.httpserver import HttpRequest, HttpResponse
from picortex.sim.model import ModelReply
from picortex.sim.world import ApiError, Json, SimError

if TYPE_CHECKING:
    from picortex.sim.simulator import Simulator

# Longest long-poll a control client may ask for, in seconds.
MAX_WAIT_SECONDS = 60.0


class _BadRequest(PicortexError):
    """A control request the simulator cannot act on."""


async def handle_control(sim: Simulator, request: HttpRequest) -> HttpResponse:
    """Serve one `/_sim/...` request."""
    route = request.path[len("/_sim") :].strip("/")
    given = request.headers.get("authorization", "")
    expected = f"Bearer {sim.control_token}"
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return HttpResponse.json(
            401, {"error": "the control API needs the simulator's control token (Bearer)"}
        )
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.body and media != "application/json":
        return HttpResponse.json(415, {"error": "the control API takes JSON bodies only"})
    try:
        body = request.json() if request.body else {}
    except orjson.JSONDecodeError:
        return HttpResponse.json(400, {"error": "the body is not valid JSON"})
    if not isinstance(body, dict):
        return HttpResponse.json(400, {"error": "the body must be a JSON object"})
    try:
        result = await _route(sim, request.method, route, body, request.query)
    except (_BadRequest, SimError, KeyError, ValueError, TypeError) as exc:
        return HttpResponse.json(400, {"error": str(exc) or type(exc).__name__})
    except ApiError as exc:
        return HttpResponse.json(exc.status, exc.body())
    if result is None:
        return HttpResponse(204)
    if isinstance(result, HttpResponse):
        return result
    return HttpResponse.json(200, result)


async def _route(
    sim: Simulator, method: str, route: str, body: dict[str, Any], query: dict[str, str]
) -> Any:
    key = (method, route)
    if key == ("GET", "state"):
        return _state(sim)
    if key == ("POST", "users"):
        user_id = sim.add_user(
            str(body["username"]),
            bot=bool(body.get("bot", False)),
            system=bool(body.get("system", False)),
            nick=str(body["nick"]) if body.get("nick") else None,
        )
        return {"id": str(user_id)}
    if key == ("POST", "nick"):
        sim.set_nick(int(body["user_id"]), str(body["nick"]) if body.get("nick") else None)
        return None
    if key == ("POST", "roles"):
        return {"id": str(sim.add_role(int(body["guild_id"]), str(body["name"])))}
    if key == ("POST", "member-roles"):
        sim.give_role(int(body["user_id"]), int(body["role_id"]))
        return None
    if key == ("POST", "forward"):
        return sim.forward_message(
            int(body["channel_id"]),
            _author(sim, body),
            int(body["source_channel_id"]),
            int(body["source_message_id"]),
        )
    if key == ("POST", "delete-bulk"):
        sim.delete_messages_bulk(int(body["channel_id"]), [int(i) for i in body["message_ids"]])
        return None
    if key == ("POST", "delete-channel"):
        sim.delete_channel(int(body["channel_id"]))
        return None
    if key == ("POST", "guilds"):
        return {"id": str(sim.add_guild(str(body["name"])))}
    if key == ("POST", "guilds/bulk"):
        made = sim.add_guilds(int(body["count"]), int(body.get("channels_per_guild", 2)))
        return {
            "guilds": [
                {"id": str(guild), "channel_ids": [str(c) for c in channels]}
                for guild, channels in made
            ]
        }
    if key == ("POST", "channels"):
        return {"id": str(sim.add_channel(int(body["guild_id"]), str(body["name"])))}
    if key == ("POST", "dms"):
        return {"id": str(sim.open_dm(int(body["user_id"])))}
    if key == ("POST", "messages"):
        return sim.post_user_message(
            int(body["channel_id"]),
            _author(sim, body),
            str(body.get("content", "")),
            mentions=[int(m) for m in body.get("mentions", [])],
            reply_to=int(body["reply_to"]) if body.get("reply_to") else None,
            attachments=list(body.get("attachments", [])),
            poll=body.get("poll"),
            stickers=[str(s) for s in body.get("stickers", [])],
        )
    if key == ("GET", "messages"):
        return await _messages(sim, query)
    if key == ("POST", "edit"):
        return sim.edit_message(
            int(body["channel_id"]), int(body["message_id"]), str(body["content"])
        )
    if key == ("POST", "delete"):
        sim.delete_message(int(body["channel_id"]), int(body["message_id"]))
        return None
    if key == ("POST", "reactions"):
        args = (
            int(body["channel_id"]),
            int(body["message_id"]),
            int(body["user_id"]),
            str(body["emoji"]),
        )
        if body.get("remove"):
            sim.remove_reaction(*args)
        else:
            sim.add_reaction(*args)
        return None
    if key == ("GET", "requests"):
        return [_request_json(r) for r in sim.requests]
    if key == ("GET", "stats"):
        stats = attrs.asdict(sim.gateway_stats)
        stats["received_ops"] = {str(op): n for op, n in stats["received_ops"].items()}
        stats["requests"] = len(sim.requests)
        stats["invalid_requests"] = sim.invalid_requests
        stats["model_calls"] = len(sim.model.calls)
        stats["shard_identifies"] = {str(k): n for k, n in stats["shard_identifies"].items()}
        limit = attrs.asdict(sim.global_stats)
        limit["per_second"] = {str(k): n for k, n in limit["per_second"].items()}
        stats["global"] = limit
        return stats
    if key == ("POST", "blast"):
        channels = body.get("channels", 50)
        result = await sim.blast(
            int(body["count"]),
            channels if isinstance(channels, int) else [int(c) for c in channels],
            int(body.get("size", 1024)),
        )
        return attrs.asdict(result)
    if key == ("POST", "model/script"):
        sim.model.script(*(_reply(r) for r in body.get("replies", [])))
        return {"pending": sim.model.pending_script}
    if key == ("GET", "model/calls"):
        return [
            {
                "model": c.model,
                "system": c.system,
                "messages": c.messages,
                "max_tokens": c.max_tokens,
            }
            for c in sim.model.calls
        ]
    if method == "POST" and route.startswith("faults/"):
        return _fault(sim, route[len("faults/") :], body)
    raise _BadRequest(f"no control route {method} /_sim/{route}")


def _fault(sim: Simulator, name: str, body: dict[str, Any]) -> None:
    if name == "drop":
        sim.drop_connections()
    elif name == "reconnect":
        close_after = body.get("close_after", 5.0)
        sim.send_reconnect(close_after=float(close_after) if close_after is not None else None)
    elif name == "invalidate":
        sim.invalidate_session(bool(body["resumable"]))
    elif name == "close":
        sim.close_connections(int(body["code"]), body.get("reason"))
    elif name == "heartbeat_ack":
        sim.set_heartbeat_ack(bool(body["enabled"]))
    elif name == "heartbeat_request":
        sim.request_heartbeat()
    elif name == "hold":
        sim.hold_events(bool(body["enabled"]))
    elif name == "rest_error":
        retry_after = body.get("retry_after")
        count = body.get("count", 1)
        sim.inject_rest_error(
            str(body.get("method", "*")),
            str(body["path_pattern"]),
            int(body["status"]),
            retry_after=float(retry_after) if retry_after is not None else None,
            global_=bool(body.get("global", False)),
            scope=body.get("scope"),
            count=int(count) if count is not None else None,
            code=body.get("code"),
            message=body.get("message"),
        )
    elif name == "rest_errors/clear":
        sim.clear_rest_errors()
    else:
        raise _BadRequest(f"no fault named {name!r}")


def _author(sim: Simulator, body: dict[str, Any]) -> int:
    if "author_id" in body:
        return int(body["author_id"])
    wanted = str(body["author"])
    for user in sim.world.users.values():
        if user.username == wanted:
            return user.id
    raise _BadRequest(f"no user named {wanted!r}")


async def _messages(sim: Simulator, query: dict[str, str]) -> list[Json]:
    channel_id = int(query["channel_id"]) if query.get("channel_id") else None
    after = int(query.get("after") or 0)
    bot_only = query.get("bot") in ("1", "true")
    wait = min(float(query.get("wait") or 0), MAX_WAIT_SECONDS)

    def current() -> list[Json]:
        if bot_only:
            found = sim.bot_messages(channel_id)
        elif channel_id is not None:
            found = sim.messages(channel_id)
        else:
            raise _BadRequest("give channel_id, or bot=1")
        return [m for m in found if int(m["id"]) > after]

    if wait > 0:
        with trio.move_on_after(wait):
            await sim.wait_until(lambda: bool(current()))
    return current()


def _state(sim: Simulator) -> Json:
    world = sim.world
    return {
        "token": sim.token,
        "bot_user_id": str(world.bot_user_id),
        "application_id": str(world.application_id),
        "urls": attrs.asdict(sim.urls) if sim.urls is not None else None,
        "users": [
            {"id": str(u.id), "username": u.username, "bot": u.bot} for u in world.users.values()
        ],
        "guilds": [
            {
                "id": str(g.id),
                "name": g.name,
                "channels": [{"id": str(c), "name": world.channels[c].name} for c in g.channel_ids],
                "threads": [{"id": str(t), "name": world.channels[t].name} for t in g.thread_ids],
            }
            for g in world.guilds.values()
        ],
        "dms": {str(user): str(channel) for user, channel in world.dm_by_user.items()},
    }


def _request_json(recorded: Any) -> Json:
    headers = dict(recorded.headers)
    if "authorization" in headers:
        headers["authorization"] = "[redacted]"
    return {
        "method": recorded.method,
        "path": recorded.path,
        "query": dict(recorded.query),
        "json": recorded.json,
        "headers": headers,
        "status": recorded.status,
        "at": recorded.at,
    }


def _reply(raw: Any) -> str | ModelReply:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, dict):
        raise _BadRequest("a scripted reply is a string or an object")
    fields = {f.name for f in attrs.fields(ModelReply)}
    unknown = set(raw) - fields
    if unknown:
        raise _BadRequest(f"unknown reply fields: {sorted(unknown)}")
    return ModelReply(**raw)
