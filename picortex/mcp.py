"""`picortex mcp`: a Model Context Protocol server on stdio over the same PICORTEX_HOME (SPEC 14).

Tools read the action log, the running bot's status, runtime config, failed invocations and
the trust list; `set_config` and `resolve_error` change what `picortex config set` and
`picortex errors resolve` change, so a running bot picks them up on its next message;
`forget_user` deletes what one person said from memory, as `forget @user` does.
Results are JSON text; bad arguments are tool errors (`isError`) with one sentence.
The SDK is anyio-based and runs here under trio.
"""

from __future__ import annotations

import io
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import mcp_types as types
import orjson
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from picortex import __version__
from picortex.cli.config import run_config_set
from picortex.cli.errors import current_pauses, error_record, pause_record
from picortex.cli.log import log_files
from picortex.cli.status import query_status
from picortex.config import (
    OVERRIDES_PREFIX,
    RUNTIME_KEYS,
    Settings,
    format_value,
    parse_runtime_value,
    runtime_key,
)
from picortex.core import chat_settings as cs
from picortex.core.commands import ATTENTION_MODES, USER_MODE_DEFAULT, parse_user_ids
from picortex.errors import ConfigError, PicortexError
from picortex.store import RESOLUTIONS, AdminStore
from picortex.store.backends import open_admin
from picortex.store.chathome import (
    AGENT_PROMPT_RESET,
    AGENT_PROMPT_SET,
    ChatHome,
    ChatHomeError,
)

logger = logging.getLogger(__name__)

SERVER_NAME: Final = "picortex"
# Log lines one call returns at most: enough to see a conversation's decisions, and small
# enough for an assistant's context.
LOG_MAX_LINES: Final = 1000
LOG_DEFAULT_LINES: Final = 50
# Ids are Discord snowflakes: digits only, as strings (JSON numbers lose precision past 2^53).
_ID_CHARS: Final = 20
# Which log fields name a user or a message (events use the word that fits them).
_USER_FIELDS: Final = ("user_id", "author_id", "requester")
_MESSAGE_FIELDS: Final = ("message_id", "trigger_id", "parent_id", "signal_id")

_ID_SCHEMA: Final = {"type": "string", "pattern": "^[0-9]{1,20}$"}
_ACCESS_LISTS: Final = ("allow_roles", "allow_channels", "deny_channels")


class _BadArgument(PicortexError):
    """A bad tool argument; the message is one sentence for the assistant (never leaves here)."""


def _tool(
    name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()
) -> types.Tool:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    read_only = not name.startswith(("set_", "resolve_", "forget_"))
    # Forgetting deletes what cannot be brought back; the other changes can be undone.
    destructive = name.startswith("forget_")
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=read_only,
            destructive_hint=destructive if not read_only else None,
            open_world_hint=False,
        ),
    )


TOOLS: Final = (
    _tool(
        "get_action_log",
        "Recent events of picortex's action log (actions.jsonl and its rotated files), newest "
        "last: every decision with its reason (why the bot answered or stayed quiet), triggers, "
        "commands, replies, model calls and errors. Filter by event type, channel, user or "
        "message id; `n` counts after filtering.",
        {
            "n": {
                "type": "integer",
                "minimum": 1,
                "maximum": LOG_MAX_LINES,
                "default": LOG_DEFAULT_LINES,
                "description": "How many events to return, the most recent ones.",
            },
            "event": {
                "type": "string",
                "description": "Only this event type, e.g. decision, trigger, command, reply, "
                "error, llm, slash.",
            },
            "channel_id": {**_ID_SCHEMA, "description": "Only events in this channel."},
            "user_id": {**_ID_SCHEMA, "description": "Only events about this user (author)."},
            "message_id": {**_ID_SCHEMA, "description": "Only events about this message."},
        },
    ),
    _tool(
        "get_status",
        "The running bot's status: gateway connection and session, heartbeat latency, channel "
        "mailboxes, actor restarts, budget spent and the last triggers. Says so when no bot is "
        "running on this home.",
        {},
    ),
    _tool(
        "get_config",
        "Runtime settings (the keys `config set` accepts) with their current values and "
        "whether each was set at runtime; one key, or all of them.",
        {
            "key": {
                "type": "string",
                "description": "One setting, e.g. wakeword or attention.group.",
            }
        },
    ),
    _tool(
        "set_config",
        "Change one runtime setting, validated like `picortex config set`; stored in "
        "picortex.db, so a running bot applies it on its next message and a stopped one at its "
        "next start. Values are text, parsed like the command line: numbers, true/false, "
        "comma-separated lists.",
        {
            "key": {"type": "string", "description": "The setting, e.g. poll_seconds."},
            "value": {"type": "string", "description": "The new value as text, e.g. 30."},
        },
        required=("key", "value"),
    ),
    _tool(
        "get_chat",
        "One chat's own settings beside the defaults: attention mode, discriminator model and "
        "confidence threshold (null: the default applies), and its own agent prompt (null: "
        "the owner's [agent] system_prompt applies).",
        {"chat_id": {**_ID_SCHEMA, "description": "The channel, thread or DM channel id."}},
        required=("chat_id",),
    ),
    _tool(
        "set_chat",
        "Change one of a chat's own settings, as `attention prompt|model|threshold` does in "
        "chat: its agent prompt (a commit in the chat home; `reset`: the owner's again), its "
        "discriminator model (`default`: the configured one) or its confidence threshold "
        "from 0 to 1 (below it the bot stays quiet; `default`: none). Give exactly one.",
        {
            "chat_id": {**_ID_SCHEMA, "description": "The channel, thread or DM channel id."},
            "prompt": {"type": "string", "description": "The chat's agent prompt, or reset."},
            "model": {"type": "string", "description": "A model id, or default."},
            "threshold": {"type": "string", "description": "A number from 0 to 1, or default."},
        },
        required=("chat_id",),
    ),
    _tool(
        "list_errors",
        "Failed model invocations (the invocation_errors table): workspace, persona, stage, "
        "error message and resolution.",
        {
            "unresolved": {
                "type": "boolean",
                "default": False,
                "description": "Only errors nobody has resolved yet.",
            }
        },
    ),
    _tool(
        "list_paused",
        "What composting pauses now: each persona or stage whose unresolved errors within "
        "an hour reached `[composting] threshold`, until when, and why. Resolving its errors "
        "lifts a pause.",
        {},
    ),
    _tool(
        "resolve_error",
        "Mark one failed invocation as resolved: fixed, dismissed or composted.",
        {
            "id": {"type": "integer", "minimum": 1, "description": "The error's id."},
            "as": {
                "type": "string",
                "enum": list(RESOLUTIONS),
                "description": "How it was resolved.",
            },
        },
        required=("id", "as"),
    ),
    _tool(
        "forget_user",
        "Delete everything picortex stored of what one user said (their messages and the "
        "persona observations of their words), at once, as `forget @user` does; whether or "
        "not they are on the trust list. Returns how many messages and observations went.",
        {"user_id": {**_ID_SCHEMA, "description": "The Discord user to forget."}},
        required=("user_id",),
    ),
    _tool(
        "get_access",
        "Access by role and channel ([access]): role ids whose members count as user tier "
        "without being listed, the channel ids the bot is limited to (empty: every channel) "
        "and the channel ids where it stays silent (commands still answer there).",
        {},
    ),
    _tool(
        "set_access",
        "Replace one or more [access] lists (each a list of Discord ids; an empty list "
        "clears it), validated like `picortex config set access.NAME`; a running bot applies "
        "it on its next message.",
        {
            name: {"type": "array", "items": _ID_SCHEMA, "description": what}
            for name, what in (
                ("allow_roles", "Roles whose members count as user tier."),
                ("allow_channels", "The only channels the bot listens in (with threads)."),
                ("deny_channels", "Channels where the bot stays silent (with threads)."),
            )
        },
    ),
    _tool(
        "get_user_attention",
        "Users' own attention modes: in a chat, a user's own mode beats the chat's mode for "
        "that user's messages. All chats, or one.",
        {"chat_id": {**_ID_SCHEMA, "description": "Only this chat (channel, thread or DM)."}},
    ),
    _tool(
        "set_user_attention",
        "Set a user's own attention mode in one chat, as `attention user @user MODE` does; "
        "`default` drops it so the chat's mode applies to them again.",
        {
            "chat_id": {**_ID_SCHEMA, "description": "The chat (channel, thread or DM)."},
            "user_id": {**_ID_SCHEMA, "description": "The user."},
            "mode": {
                "type": "string",
                "enum": [*ATTENTION_MODES, USER_MODE_DEFAULT],
                "description": "The user's own mode here, or default.",
            },
        },
        required=("chat_id", "user_id", "mode"),
    ),
    _tool(
        "get_trust_list",
        "Who the bot answers: the owner (always admin) and each trusted user with their tier "
        "(user, trusted or admin).",
        {},
    ),
)


def _args(raw: Mapping[str, Any] | None, allowed: tuple[str, ...]) -> dict[str, Any]:
    args = dict(raw or {})
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise _BadArgument(f"Unknown argument `{unknown[0]}`.")
    return args


def _optional_id(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    text = (
        str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    )
    if not text.isdigit() or len(text) > _ID_CHARS:
        raise _BadArgument(f"`{name}` must be a Discord id (digits, as a string).")
    return text


def _optional_text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _BadArgument(f"`{name}` must be a string.")
    return value.strip() or None


def _required_text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # a lenient client sending 30 for "30"
    if not isinstance(value, str) or not value.strip():
        raise _BadArgument(f"`{name}` is required (a non-empty string).")
    return value


class Tools:
    """What each tool does, over one PICORTEX_HOME; every method returns a JSON value."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _store(self) -> AdminStore:
        return open_admin(self.settings)

    def call(self, name: str, raw: Mapping[str, Any] | None) -> Any:
        """Run one tool; raises _BadArgument for bad arguments or an unknown tool."""
        handler: Callable[[Mapping[str, Any] | None], Any] | None = getattr(
            self, f"_tool_{name}", None
        )
        if handler is None or name not in {t.name for t in TOOLS}:
            raise _BadArgument(f"There is no tool named `{name}`.")
        return handler(raw)

    def _tool_get_action_log(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("n", "event", "channel_id", "user_id", "message_id"))
        n = args.get("n", LOG_DEFAULT_LINES)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= LOG_MAX_LINES:
            raise _BadArgument(f"`n` must be a whole number from 1 to {LOG_MAX_LINES}.")
        event = _optional_text(args, "event")
        channel = _optional_id(args, "channel_id")
        user = _optional_id(args, "user_id")
        message = _optional_id(args, "message_id")
        found: deque[dict[str, Any]] = deque(maxlen=n)
        for path in log_files(self.settings.action_log_path):
            try:
                data = path.read_bytes()
            except OSError:
                continue  # rotated away while reading
            for line in data.splitlines():
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a torn last line of a running bot
                if not isinstance(record, dict):
                    continue
                if event is not None and record.get("event") != event:
                    continue
                if channel is not None and str(record.get("channel_id")) != channel:
                    continue
                if user is not None and not _names(record, _USER_FIELDS, user):
                    continue
                if message is not None and not _names(record, _MESSAGE_FIELDS, message):
                    continue
                found.append(record)
        return list(found)

    def _tool_get_status(self, raw: Mapping[str, Any] | None) -> Any:
        _args(raw, ())
        status = query_status(self.settings.home)
        if status is None:
            return {
                "running": False,
                "message": "picortex is not running on this home; start it with `picortex run`.",
            }
        return {"running": True, **status}

    def _tool_get_config(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("key",))
        key = _optional_text(args, "key")
        store = self._store()
        try:
            stored = store.runtime_config()
        finally:
            store.close()
        try:
            effective = self.settings.with_runtime(stored)
        except ConfigError as exc:
            return {"error": str(exc)}
        if key is None:
            names = [*RUNTIME_KEYS]
            names += [OVERRIDES_PREFIX + c for c in sorted(effective.response_policy.overrides)]
        else:
            try:
                names = [runtime_key(key)]
            except ConfigError as exc:
                raise _BadArgument(_sentence(exc)) from None
        return {
            name: {"value": format_value(effective.value_of(name)), "runtime": name in stored}
            for name in names
        }

    def _tool_set_config(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("key", "value"))
        key = _required_text(args, "key")
        value = _required_text(args, "value")
        out, err = io.StringIO(), io.StringIO()
        store = self._store()
        try:
            # Exactly what `picortex config set` does, `attention.<chat_id>` included.
            code = run_config_set(store, self.settings, key, value, out, err=err, now=time.time())
        finally:
            store.close()
        if code != 0:
            raise _BadArgument(_sentence(ConfigError(err.getvalue())))
        name, _, text = out.getvalue().strip().partition(" = ")
        running = query_status(self.settings.home) is not None
        return {
            "key": name,
            "value": text,
            "applied": "now" if running else "next start",
            "message": (
                f"{name} = {text}; the running bot applies it on its next message."
                if running
                else f"{name} = {text} is stored; no bot is running, so it applies at the "
                "next start."
            ),
        }

    def _tool_list_errors(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("unresolved",))
        unresolved = args.get("unresolved", False)
        if not isinstance(unresolved, bool):
            raise _BadArgument("`unresolved` must be true or false.")
        store = self._store()
        try:
            return [error_record(e) for e in store.invocation_errors(unresolved_only=unresolved)]
        finally:
            store.close()

    def _tool_list_paused(self, raw: Mapping[str, Any] | None) -> Any:
        _args(raw, ())
        store = self._store()
        try:
            try:
                live = self.settings.with_runtime(store.runtime_config())
            except ConfigError:  # a bad stored value: the file's settings still tell
                live = self.settings
            found = current_pauses(store, live.composting, time.time())
        finally:
            store.close()
        return [pause_record(p, live.composting.threshold) for p in found]

    def _tool_resolve_error(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("id", "as"))
        error_id = args.get("id")
        if isinstance(error_id, str) and error_id.strip().isdigit():
            error_id = int(error_id)
        if isinstance(error_id, bool) or not isinstance(error_id, int) or error_id < 1:
            raise _BadArgument("`id` must be an error id (a positive whole number).")
        resolution = args.get("as")
        if resolution not in RESOLUTIONS:
            raise _BadArgument(f"`as` must be one of {', '.join(RESOLUTIONS)}.")
        store = self._store()
        try:
            if not store.resolve_invocation_error(error_id, resolution, time.time()):
                raise _BadArgument(f"No invocation error has id {error_id}.")
            row = store.invocation_error(error_id)
        finally:
            store.close()
        return error_record(row) if row is not None else {"id": error_id, "resolution": resolution}

    def _tool_forget_user(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("user_id",))
        user = _optional_id(args, "user_id")
        found = parse_user_ids(user) if user is not None else None
        if not found:
            raise _BadArgument("`user_id` must be the Discord id of the user to forget.")
        store = self._store()
        try:
            messages, observations = store.forget_user_now(found[0])
        finally:
            store.close()
        return {"user_id": str(found[0]), "messages": messages, "observations": observations}

    def _tool_get_access(self, raw: Mapping[str, Any] | None) -> Any:
        _args(raw, ())
        store = self._store()
        try:
            stored = store.runtime_config()
        finally:
            store.close()
        try:
            access = self.settings.with_runtime(stored).access
        except ConfigError as exc:
            return {"error": str(exc)}
        return {name: [str(i) for i in getattr(access, name)] for name in _ACCESS_LISTS}

    def _tool_set_access(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, _ACCESS_LISTS)
        if not args:
            raise _BadArgument(f"Give at least one of {', '.join(_ACCESS_LISTS)}.")
        values: dict[str, str] = {}
        for name, ids in args.items():
            if not isinstance(ids, list):
                raise _BadArgument(f"`{name}` must be a list of Discord ids (strings).")
            checked = [_optional_id({name: i}, name) for i in ids]
            values[f"access.{name}"] = ", ".join(i for i in checked if i) or "none"
        for key, value in values.items():  # every list checked before any is stored
            try:
                parse_runtime_value(key, value)
            except ConfigError as exc:
                raise _BadArgument(_sentence(exc)) from None
        for key, value in values.items():
            self._tool_set_config({"key": key, "value": value})
        running = query_status(self.settings.home) is not None
        return {**self._tool_get_access({}), "applied": "now" if running else "next start"}

    def _tool_get_user_attention(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("chat_id",))
        chat = _optional_id(args, "chat_id")
        store = self._store()
        try:
            rows = store.user_attentions()
        finally:
            store.close()
        return [
            {"chat_id": str(r.chat_id), "user_id": str(r.user_id), "mode": r.mode}
            for r in rows
            if chat is None or str(r.chat_id) == chat
        ]

    def _tool_set_user_attention(self, raw: Mapping[str, Any] | None) -> Any:
        args = _args(raw, ("chat_id", "user_id", "mode"))
        chat, user = _optional_id(args, "chat_id"), _optional_id(args, "user_id")
        if chat is None or user is None or int(chat) == 0 or int(user) == 0:
            raise _BadArgument("`chat_id` and `user_id` must be Discord ids.")
        mode = args.get("mode")
        choices = (*ATTENTION_MODES, USER_MODE_DEFAULT)
        if mode not in choices:
            raise _BadArgument(f"`mode` must be one of {', '.join(choices)}.")
        store = self._store()
        try:
            if mode == USER_MODE_DEFAULT:
                store.delete_user_attention(int(chat), int(user))
            else:
                store.set_user_attention(int(chat), int(user), str(mode), time.time())
        finally:
            store.close()
        return {"chat_id": chat, "user_id": user, "mode": mode}

    def _chat(
        self, raw: Mapping[str, Any] | None, allowed: tuple[str, ...]
    ) -> tuple[dict[str, Any], int, cs.ChatSettings, str | None]:
        """The arguments, the chat id, its own settings and its own attention mode."""
        args = _args(raw, ("chat_id", *allowed))
        chat_id = _optional_id(args, "chat_id")
        if chat_id is None or int(chat_id) == 0:
            raise _BadArgument("`chat_id` must be the Discord id of the chat.")
        store = self._store()
        try:
            own = store.get_chat_config(int(chat_id))
        finally:
            store.close()
        try:
            prompt = ChatHome(self.settings.home, chat_id).read_agent_prompt()
        except ChatHomeError as exc:
            raise _BadArgument(_sentence(exc)) from None
        settings = cs.ChatSettings(
            prompt=prompt,
            model=own.discriminator_model if own is not None else None,
            threshold=own.discriminator_threshold if own is not None else None,
            default_model=self.settings.discriminator.model,
        )
        return args, int(chat_id), settings, own.attention_mode if own is not None else None

    def _tool_get_chat(self, raw: Mapping[str, Any] | None) -> Any:
        _, chat_id, own, mode = self._chat(raw, ())
        return {
            "chat_id": str(chat_id),
            "attention_mode": mode,
            "discriminator_model": own.model,
            "discriminator_threshold": own.threshold,
            "agent_prompt": own.prompt,
            "default_discriminator_model": own.default_model,
        }

    def _tool_set_chat(self, raw: Mapping[str, Any] | None) -> Any:
        args, chat_id, current, _ = self._chat(raw, cs.FIELDS)
        given = [f for f in cs.FIELDS if args.get(f) is not None]
        if len(given) != 1:
            raise _BadArgument("Give exactly one of `prompt`, `model` or `threshold`.")
        [field] = given
        try:
            value = cs.parse_value(field, _required_text(args, field))
        except ConfigError as exc:
            raise _BadArgument(str(exc)) from None
        message, change = cs.execute(cs.ChatSettingSet(field, value), current)
        if change is not None:
            self._store_chat_setting(chat_id, change, current)
        return {"chat_id": str(chat_id), "changed": change is not None, "message": message}

    def _store_chat_setting(
        self, chat_id: int, change: cs.ChatSettingChange, current: cs.ChatSettings
    ) -> None:
        if change.field == "prompt":
            home = ChatHome(self.settings.home, str(chat_id))
            try:
                if change.value is None:
                    home.reset_agent_prompt(AGENT_PROMPT_RESET)
                else:
                    home.write_agent_prompt(str(change.value), AGENT_PROMPT_SET)
            except ChatHomeError as exc:
                raise _BadArgument(_sentence(exc)) from None
            return
        model, threshold = current.model, current.threshold
        if change.field == "model":
            model = None if change.value is None else str(change.value)
        else:
            threshold = None if change.value is None else float(change.value)
        store = self._store()
        try:
            store.set_discriminator(chat_id, model, threshold, time.time())
        finally:
            store.close()

    def _tool_get_trust_list(self, raw: Mapping[str, Any] | None) -> Any:
        _args(raw, ())
        owner = self.settings.owner_id
        store = self._store()
        try:
            listed = store.trust_list()
        finally:
            store.close()
        users = [{"user_id": str(owner), "tier": "admin", "owner": True}] if owner else []
        users += [
            {"user_id": str(uid), "tier": tier, "owner": False}
            for uid, tier in listed
            if uid != owner
        ]
        return users


def _names(record: Mapping[str, Any], fields: tuple[str, ...], wanted: str) -> bool:
    return any(str(record.get(f)) == wanted for f in fields if record.get(f) is not None)


def _sentence(exc: Exception) -> str:
    # Not capitalized: the sentence often starts with a key name, which is lowercase.
    text = " ".join(str(exc).split()) or "that value is not valid"
    return text if text.endswith(".") else text + "."


def _text(value: Any, *, error: bool = False) -> types.CallToolResult:
    body = value if isinstance(value, str) else orjson.dumps(value).decode()
    return types.CallToolResult(content=[types.TextContent(type="text", text=body)], is_error=error)


def build_server(settings: Settings) -> Server[Any]:
    """The MCP server with picortex's tools over `settings.home`."""
    tools = Tools(settings)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            # SQLite and file reads are short, but off the event loop all the same.
            result = await trio.to_thread.run_sync(tools.call, params.name, params.arguments)
        except _BadArgument as exc:
            return _text(str(exc), error=True)
        except Exception as exc:  # a broken home: one sentence, never a traceback
            logger.warning("tool %s failed: %s", params.name, exc)
            return _text(f"{params.name} failed: {_sentence(exc)}", error=True)
        return _text(result)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=(
            "picortex is a Discord bot. These tools read its action log (why it answered or "
            "stayed quiet), status, config, errors and trust list, and change its config."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(settings: Settings) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    server = build_server(settings)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_mcp(settings: Settings) -> int:
    """`picortex mcp`: exit 0 when the client disconnects."""
    trio.run(serve_stdio, settings)
    return 0
