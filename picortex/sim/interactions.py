"""Application commands and interactions as the simulator serves them (Discord's docs).

Commands are registered with the bulk-overwrite routes (globally or per guild) and checked
the way Discord checks them; a user "runs" a registered command, which sends
INTERACTION_CREATE with the payload Discord documents. The bot answers on the callback
route within 3 s, then edits `@original` and sends follow-ups with the token for 15
minutes. Ephemeral answers are kept here, visible to the one user, not in the channel.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from picortex.sim.world import (
    MAX_CONTENT_CHARS,
    ApiError,
    Dispatch,
    Json,
    SimError,
    World,
    form_error,
    unknown_message,
)

# Discord's limits and codes for application commands and interactions.
MAX_COMMANDS: Final = 100  # chat-input commands per scope
MAX_OPTIONS: Final = 25
MAX_CHOICES: Final = 25
MAX_DESCRIPTION: Final = 100
NAME_PATTERN: Final = re.compile(r"^[-_\w]{1,32}$")
INITIAL_RESPONSE_SECONDS: Final = 3.0
TOKEN_SECONDS: Final = 15 * 60.0
SUB_COMMAND: Final = 1
SUB_COMMAND_GROUP: Final = 2
STRING: Final = 3
INTEGER: Final = 4
BOOLEAN: Final = 5
USER: Final = 6
CHANNEL: Final = 7
ROLE: Final = 8
NUMBER: Final = 10
APPLICATION_COMMAND: Final = 2
AUTOCOMPLETE: Final = 4
PONG: Final = 1
CHANNEL_MESSAGE: Final = 4
DEFERRED_CHANNEL_MESSAGE: Final = 5
AUTOCOMPLETE_RESULT: Final = 8
EPHEMERAL: Final = 1 << 6
LOADING: Final = 1 << 7
CHAT_INPUT_COMMAND_MESSAGE: Final = 20
_USER_TOKEN: Final = re.compile(r"<@!?(\d+)>|(\d{5,20})")
_ROLE_TOKEN: Final = re.compile(r"<@&(\d+)>|(\d{5,20})")
_CHANNEL_TOKEN: Final = re.compile(r"<#(\d+)>|(\d{5,20})")


def _unknown_interaction() -> ApiError:
    return ApiError(404, 10062, "Unknown interaction")


def _invalid_token() -> ApiError:
    return ApiError(401, 50027, "Invalid Webhook Token")


@attrs.define
class SimAnswer:
    """One message the bot sent for an interaction (first response, edit or follow-up)."""

    kind: str  # "response", "deferred", "edit", "followup", "edit_followup", "autocomplete"
    content: str
    ephemeral: bool
    message_id: int | None = None
    choices: list[Json] = attrs.Factory(list)


@attrs.define
class SimInteraction:
    """An interaction sent to the bot and everything it answered."""

    id: int
    token: str
    type: int
    channel_id: int
    guild_id: int | None
    user_id: int
    command: str  # the command line as the user ran it
    created_at: float
    response_type: int | None = None
    responded_at: float | None = None
    ephemeral: bool = False
    original_id: int | None = None  # the channel message of a non-ephemeral response
    answers: list[SimAnswer] = attrs.Factory(list)

    @property
    def text(self) -> str:
        """What the user sees now: the first response (as edited) and the follow-ups."""
        parts: list[str] = []
        for answer in self.answers:
            if answer.kind == "edit" and parts:
                parts[0] = answer.content
            elif answer.kind in ("response", "edit", "followup"):
                parts.append(answer.content)
        return "\n".join(parts)

    def summary(self) -> Json:
        """A JSON view for the control API and the chat terminal."""
        return {
            "id": str(self.id),
            "type": self.type,
            "channel_id": str(self.channel_id),
            "user_id": str(self.user_id),
            "command": self.command,
            "response_type": self.response_type,
            "ephemeral": self.ephemeral,
            "text": self.text,
            "answers": [attrs.asdict(a) for a in self.answers],
        }


class SimInteractions:
    """Registered application commands and the interactions sent with them."""

    def __init__(self, world: World, clock: Callable[[], float]) -> None:
        self.world = world
        self._clock = clock
        # (guild id or None for global) -> commands by name, as Discord returns them.
        self.commands: dict[int | None, dict[str, Json]] = {}
        self.overwrites: list[tuple[int | None, list[Json]]] = []  # what each PUT sent
        self.interactions: dict[int, SimInteraction] = {}

    # ------------------------------------------------------------ registration

    def overwrite(self, application_id: int, guild_id: int | None, body: Any) -> list[Json]:
        """Bulk overwrite: the scope's commands become exactly `body` (ids kept by name)."""
        if application_id != self.world.application_id:
            raise ApiError(403, 50001, "Missing Access")
        if guild_id is not None:
            self.world.guild(guild_id)
        if not isinstance(body, list):
            raise form_error("_root", "LIST_TYPE_CONVERT", "Must be an array.")
        if len(body) > MAX_COMMANDS:
            raise form_error("_root", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
        old = self.commands.get(guild_id, {})
        new: dict[str, Json] = {}
        for index, raw in enumerate(body):
            if not isinstance(raw, dict):
                raise form_error(str(index), "MODEL_TYPE_CONVERT", "Must be an object.")
            _check_command(raw, str(index))
            name = raw["name"]
            if name in new:
                raise ApiError(400, 50035, "Application command names must be unique")
            kept = old.get(name)
            command_id = int(kept["id"]) if kept else self.world.snowflakes.next()
            out: Json = {
                "id": str(command_id),
                "application_id": str(application_id),
                "version": str(self.world.snowflakes.next()),
                "default_member_permissions": raw.get("default_member_permissions"),
                "type": raw.get("type", 1),
                "name": name,
                "name_localizations": None,
                "description": raw.get("description", ""),
                "description_localizations": None,
                "options": raw.get("options", []),
                "nsfw": bool(raw.get("nsfw", False)),
            }
            if guild_id is None:
                out["contexts"] = raw.get("contexts")
                out["integration_types"] = raw.get("integration_types", [0])
                out["dm_permission"] = True
            else:
                out["guild_id"] = str(guild_id)
            new[name] = out
        self.commands[guild_id] = new
        self.overwrites.append((guild_id, [dict(c) for c in body]))
        return list(new.values())

    def registered(self, application_id: int, guild_id: int | None) -> list[Json]:
        """The commands registered in a scope."""
        if application_id != self.world.application_id:
            raise ApiError(403, 50001, "Missing Access")
        return list(self.commands.get(guild_id, {}).values())

    # ------------------------------------------------------------ a user runs one

    def run(
        self,
        channel_id: int,
        user_id: int,
        line: str,
        *,
        autocomplete: str | None = None,
    ) -> SimInteraction:
        """A user runs `line` (`picortex attention mode:silent`, `picortex ask hi there`).

        Words pick the subcommand group and subcommand; `name:value` sets an option, other
        words fill the remaining options in order (the last string option takes the rest).
        With `autocomplete` the named option is being typed: an autocomplete interaction.
        """
        channel = self.world.channel(channel_id)
        self.world.user(user_id)
        words = line.strip().lstrip("/").split()
        if not words:
            raise SimError("no command given")
        command = self._registered(words[0], channel.guild_id)
        options, resolved = self._options(command, words[1:], channel.guild_id, autocomplete)
        interaction_id = self.world.snowflakes.next()
        token = _token(interaction_id)
        kind = AUTOCOMPLETE if autocomplete else APPLICATION_COMMAND
        data: Json = {
            "id": command["id"],
            "name": command["name"],
            "type": command.get("type", 1),
        }
        if options:
            data["options"] = options
        if resolved:
            data["resolved"] = resolved
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        payload: Json = {
            "id": str(interaction_id),
            "application_id": str(self.world.application_id),
            "type": kind,
            "data": data,
            "channel_id": str(channel.id),
            "channel": self._channel_partial(channel_id),
            "token": token,
            "version": 1,
            "app_permissions": "562949953601536",
            "locale": "en-US",
            "entitlements": [],
            "entitlement_sku_ids": [],
            "attachment_size_limit": 10485760,
        }
        if channel.guild_id is not None:
            member = self.world.member_payload(user_id, with_user=True, guild_id=channel.guild_id)
            member["permissions"] = "2248473465835073"
            payload["guild_id"] = str(channel.guild_id)
            payload["guild"] = {"id": str(channel.guild_id), "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = member
            payload["context"] = 0
            payload["authorizing_integration_owners"] = {"0": str(channel.guild_id)}
        else:
            payload["user"] = self.world.user_payload(user_id)
            payload["context"] = 1
            payload["authorizing_integration_owners"] = {"0": str(user_id)}
        interaction = SimInteraction(
            id=interaction_id,
            token=token,
            type=kind,
            channel_id=channel.id,
            guild_id=channel.guild_id,
            user_id=user_id,
            command="/" + " ".join(words),
            created_at=self._clock(),
        )
        self.interactions[interaction_id] = interaction
        self.world.outbox.append(Dispatch("INTERACTION_CREATE", payload, channel.guild_id, None))
        return interaction

    def _registered(self, name: str, guild_id: int | None) -> Json:
        scopes: list[int | None] = [guild_id, None] if guild_id is not None else [None]
        for scope in scopes:
            found = self.commands.get(scope, {}).get(name)
            if found is not None:
                if scope is None and guild_id is None:
                    contexts = found.get("contexts")
                    if contexts is not None and 1 not in contexts:
                        break
                return found
        raise SimError(f"/{name} is not a registered command here")

    def _options(
        self,
        command: Json,
        words: list[str],
        guild_id: int | None,
        autocomplete: str | None,
    ) -> tuple[list[Json], Json]:
        resolved: Json = {}
        declared: list[Json] = command.get("options") or []
        path: list[Json] = []  # the chain of subcommand option objects built so far
        while words and any(o["type"] in (SUB_COMMAND, SUB_COMMAND_GROUP) for o in declared):
            chosen = next((o for o in declared if o["name"] == words[0]), None)
            if chosen is None:
                raise SimError(f"no subcommand {words[0]!r}")
            path.append({"name": chosen["name"], "type": chosen["type"], "options": []})
            declared = chosen.get("options") or []
            words = words[1:]
        if any(o["type"] in (SUB_COMMAND, SUB_COMMAND_GROUP) for o in declared):
            raise SimError("a subcommand is needed")
        values = self._fill(declared, words, guild_id, resolved, autocomplete)
        leaf: list[Json] = values
        for node in reversed(path):
            node["options"] = leaf
            leaf = [node]
        return leaf, resolved

    def _fill(
        self,
        declared: list[Json],
        words: list[str],
        guild_id: int | None,
        resolved: Json,
        autocomplete: str | None,
    ) -> list[Json]:
        given: dict[str, str] = {}
        positional: list[str] = []
        by_name = {o["name"]: o for o in declared}
        last: str | None = None
        for word in words:
            key, sep, value = word.partition(":")
            if sep and key in by_name and key not in given:
                given[key] = value
                last = key
            elif last is not None and by_name[last]["type"] == STRING:
                given[last] += " " + word  # a value with spaces: `text:hello there`
            else:
                positional.append(word)
                last = None
        while positional:
            word = positional[0]
            option = next(
                (o for o in declared if o["name"] not in given and _accepts(o, word)), None
            )
            if option is None:
                break
            free_text = option["type"] == STRING and not option.get("choices")
            if free_text and not any(
                o["type"] == STRING and o["name"] not in given and o is not option
                for o in declared[declared.index(option) + 1 :]
            ):
                given[option["name"]] = " ".join(positional)  # the last one takes the rest
                positional = []
            else:
                given[option["name"]] = positional.pop(0)
        if positional:
            raise SimError(f"too many values: {' '.join(positional)}")
        out: list[Json] = []
        for option in declared:
            name = option["name"]
            if name not in given:
                if option.get("required") and autocomplete is None:
                    raise SimError(f"option {name!r} is required")
                continue
            out.append(self._value(option, given[name], guild_id, resolved, autocomplete))
        if autocomplete is not None and not any(o.get("focused") for o in out):
            focus = next((o for o in declared if o["name"] == autocomplete), None)
            if focus is None:
                raise SimError(f"no option {autocomplete!r} to autocomplete")
            out.append({"name": autocomplete, "type": focus["type"], "value": "", "focused": True})
        return out

    def _value(
        self,
        option: Json,
        text: str,
        guild_id: int | None,
        resolved: Json,
        autocomplete: str | None,
    ) -> Json:
        kind = option["type"]
        value: Any = text
        if kind == USER:
            match = _USER_TOKEN.fullmatch(text)
            if match is None:
                raise SimError(f"{text!r} is not a user")
            user_id = int(match.group(1) or match.group(2))
            self.world.user(user_id)
            value = str(user_id)
            resolved.setdefault("users", {})[value] = self.world.user_payload(user_id)
            if guild_id is not None:
                member = self.world.member_payload(user_id, with_user=False)
                member["permissions"] = "0"
                resolved.setdefault("members", {})[value] = member
        elif kind == ROLE:
            value = self._role(text, guild_id)
            roles = resolved.setdefault("roles", {})
            roles[value] = self.world.role_payload(int(value), self._role_name(int(value)))
        elif kind == CHANNEL:
            match = _CHANNEL_TOKEN.fullmatch(text)
            if match is None or int(match.group(1) or match.group(2)) not in self.world.channels:
                raise SimError(f"{text!r} is not a channel")
            value = str(int(match.group(1) or match.group(2)))
            resolved.setdefault("channels", {})[value] = self._channel_partial(int(value))
        elif kind == INTEGER:
            value = int(text)
        elif kind == NUMBER:
            value = float(text)
        elif kind == BOOLEAN:
            value = text.lower() in ("true", "yes", "1")
        out: Json = {"name": option["name"], "type": kind, "value": value}
        if option["name"] == autocomplete:
            out["focused"] = True
        elif option.get("choices") and value not in [c["value"] for c in option["choices"]]:
            raise SimError(f"{text!r} is not one of the choices of {option['name']!r}")
        return out

    def _role(self, text: str, guild_id: int | None) -> str:
        match = _ROLE_TOKEN.fullmatch(text)
        guild = self.world.guilds.get(guild_id) if guild_id is not None else None
        if (
            match is None
            or guild is None
            or int(match.group(1) or match.group(2)) not in guild.roles
        ):
            raise SimError(f"{text!r} is not a role of this guild")
        return str(int(match.group(1) or match.group(2)))

    def _role_name(self, role_id: int) -> str:
        for guild in self.world.guilds.values():
            if role_id in guild.roles:
                return guild.roles[role_id]
        return str(role_id)

    def _channel_partial(self, channel_id: int) -> Json:
        channel = self.world.channels[channel_id]
        payload = self.world.channel_payload(channel)
        payload["permissions"] = "2248473465835073"
        return payload

    # ------------------------------------------------------------ the bot answers

    def _find(self, interaction_id: int, token: str) -> SimInteraction:
        found = self.interactions.get(interaction_id)
        if found is None or not secrets.compare_digest(found.token, token):
            raise _unknown_interaction()
        return found

    def _by_token(self, application_id: int, token: str) -> SimInteraction:
        if application_id != self.world.application_id:
            raise _invalid_token()
        for interaction in self.interactions.values():
            if secrets.compare_digest(interaction.token, token):
                if self._clock() - interaction.created_at > TOKEN_SECONDS:
                    raise _invalid_token()
                return interaction
        raise _invalid_token()

    def callback(
        self, interaction_id: int, token: str, body: Any, *, with_response: bool = False
    ) -> Json | None:
        """POST /interactions/{id}/{token}/callback: the one initial response.

        With `with_response` the answer is Discord's interaction callback response object
        (the interaction and the message created), else nothing (204).
        """
        interaction = self._find(interaction_id, token)
        now = self._clock()
        if interaction.response_type is not None:
            raise ApiError(400, 40060, "Interaction has already been acknowledged.")
        if now - interaction.created_at > INITIAL_RESPONSE_SECONDS:
            raise _unknown_interaction()
        if not isinstance(body, dict) or not isinstance(body.get("type"), int):
            raise form_error("type", "BASE_TYPE_REQUIRED", "This field is required")
        kind = body["type"]
        data = body.get("data") or {}
        if not isinstance(data, dict):
            raise form_error("data", "MODEL_TYPE_CONVERT", "Must be an object.")
        if interaction.type == AUTOCOMPLETE:
            if kind != AUTOCOMPLETE_RESULT:
                raise form_error("type", "INTERACTION_RESPONSE_TYPE_INVALID", "Invalid type")
            choices = data.get("choices")
            if not isinstance(choices, list) or len(choices) > MAX_CHOICES:
                raise form_error("data.choices", "BASE_TYPE_MAX_LENGTH", "25 choices at most")
            interaction.answers.append(SimAnswer("autocomplete", "", True, choices=choices))
        elif kind == CHANNEL_MESSAGE:
            content = _content(data, required=True)
            interaction.ephemeral = bool(int(data.get("flags", 0) or 0) & EPHEMERAL)
            interaction.original_id = self._post(interaction, content, interaction.ephemeral, 0)
            interaction.answers.append(
                SimAnswer("response", content, interaction.ephemeral, interaction.original_id)
            )
        elif kind == DEFERRED_CHANNEL_MESSAGE:
            interaction.ephemeral = bool(int(data.get("flags", 0) or 0) & EPHEMERAL)
            interaction.original_id = self._post(interaction, "", interaction.ephemeral, LOADING)
            interaction.answers.append(
                SimAnswer("deferred", "", interaction.ephemeral, interaction.original_id)
            )
        else:
            raise form_error("type", "INTERACTION_RESPONSE_TYPE_INVALID", "Invalid type")
        interaction.response_type = kind
        interaction.responded_at = now
        if not with_response:
            return None
        about: Json = {
            "id": str(interaction.id),
            "type": interaction.type,
            "response_message_loading": kind == DEFERRED_CHANNEL_MESSAGE,
            "response_message_ephemeral": interaction.ephemeral,
        }
        resource: Json = {"type": kind}
        if kind in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            message = self.original(self.world.application_id, token)
            about["response_message_id"] = message["id"]
            resource["message"] = message
        return {"interaction": about, "resource": resource}

    def edit_original(self, application_id: int, token: str, body: Any) -> Json:
        """PATCH /webhooks/{app}/{token}/messages/@original."""
        interaction = self._by_token(application_id, token)
        if interaction.response_type not in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            raise unknown_message()
        content = _content(body if isinstance(body, dict) else {}, required=False)
        interaction.answers.append(
            SimAnswer("edit", content, interaction.ephemeral, interaction.original_id)
        )
        if interaction.original_id is not None:
            message = self.world.message(interaction.channel_id, interaction.original_id)
            message.flags &= ~LOADING
            self.world.edit_message(interaction.channel_id, message.id, content)
            return self.world.message_payload(message, gateway=False)
        return self._ephemeral_payload(interaction, content)

    def original(self, application_id: int, token: str) -> Json:
        """GET /webhooks/{app}/{token}/messages/@original."""
        interaction = self._by_token(application_id, token)
        if interaction.response_type not in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            raise unknown_message()
        if interaction.original_id is not None:
            message = self.world.message(interaction.channel_id, interaction.original_id)
            return self.world.message_payload(message, gateway=False)
        return self._ephemeral_payload(interaction, interaction.text)

    def followup(self, application_id: int, token: str, body: Any) -> Json:
        """POST /webhooks/{app}/{token}: a follow-up message (needs the initial response)."""
        interaction = self._by_token(application_id, token)
        if interaction.response_type is None:
            raise _unknown_interaction()
        data = body if isinstance(body, dict) else {}
        content = _content(data, required=True)
        ephemeral = bool(int(data.get("flags", 0) or 0) & EPHEMERAL)
        message_id = self._post(interaction, content, ephemeral, 0)
        interaction.answers.append(SimAnswer("followup", content, ephemeral, message_id))
        if message_id is not None:
            message = self.world.message(interaction.channel_id, message_id)
            return self.world.message_payload(message, gateway=False)
        return self._ephemeral_payload(interaction, content)

    def edit_followup(self, application_id: int, token: str, message_id: Any, body: Any) -> Json:
        """PATCH /webhooks/{app}/{token}/messages/{message_id}: edit one follow-up."""
        interaction = self._by_token(application_id, token)
        try:
            wanted = int(message_id)
        except (TypeError, ValueError):
            raise unknown_message() from None
        if not any(a.kind == "followup" and a.message_id == wanted for a in interaction.answers):
            raise unknown_message()
        content = _content(body if isinstance(body, dict) else {}, required=False)
        interaction.answers.append(SimAnswer("edit_followup", content, False, wanted))
        self.world.edit_message(interaction.channel_id, wanted, content)
        return self.world.message_payload(
            self.world.message(interaction.channel_id, wanted), gateway=False
        )

    def _post(
        self, interaction: SimInteraction, content: str, ephemeral: bool, flags: int
    ) -> int | None:
        """A visible answer is a channel message from the bot; an ephemeral one is not."""
        if ephemeral:
            return None
        message = self.world.create_message(interaction.channel_id, self.world.bot_user_id, content)
        message.type = CHAT_INPUT_COMMAND_MESSAGE
        message.flags = flags
        # The MESSAGE_CREATE just queued shows the answer as Discord does: the command
        # message type, its flags, and who ran which command.
        event = self.world.outbox[-1]
        if event.name == "MESSAGE_CREATE":
            event.data["type"] = CHAT_INPUT_COMMAND_MESSAGE
            event.data["flags"] = flags
            event.data["interaction_metadata"] = {
                "id": str(interaction.id),
                "type": APPLICATION_COMMAND,
                "user": self.world.user_payload(interaction.user_id),
                "authorizing_integration_owners": {},
            }
        return message.id

    def _ephemeral_payload(self, interaction: SimInteraction, content: str) -> Json:
        return {
            "id": str(self.world.snowflakes.next()),
            "type": CHAT_INPUT_COMMAND_MESSAGE,
            "channel_id": str(interaction.channel_id),
            "content": content,
            "flags": EPHEMERAL,
            "author": self.world.bot_user_payload(),
            "attachments": [],
            "embeds": [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "components": [],
        }


def _accepts(option: Mapping[str, Any], word: str) -> bool:
    """Whether a bare word can be the value of `option` (by its type and choices)."""
    kind = option["type"]
    if kind == USER:
        return _USER_TOKEN.fullmatch(word) is not None
    if kind == ROLE:
        return _ROLE_TOKEN.fullmatch(word) is not None
    if kind == CHANNEL:
        return _CHANNEL_TOKEN.fullmatch(word) is not None
    if kind == INTEGER:
        return word.lstrip("-").isdigit()
    choices = option.get("choices")
    if choices:
        return word in [str(c.get("value")) for c in choices]
    return True


def _token(interaction_id: int) -> str:
    """A token shaped like Discord's: base64url of `interaction:<id>:<random>`."""
    raw = f"interaction:{interaction_id}:{secrets.token_urlsafe(48)}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _content(data: Mapping[str, Any], *, required: bool) -> str:
    content = data.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise form_error("content", "BASE_TYPE_STRING", "Must be a string.")
    if len(content) > MAX_CONTENT_CHARS:
        raise form_error(
            "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT_CHARS} or fewer in length."
        )
    if required and not content and not data.get("embeds"):
        raise ApiError(400, 50006, "Cannot send an empty message")
    return content


def _check_command(raw: Mapping[str, Any], where: str) -> None:
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or name != name.lower():
        raise form_error(f"{where}.name", "APPLICATION_COMMAND_INVALID_NAME", "Invalid name")
    if raw.get("type", 1) == 1:
        _check_description(raw.get("description"), f"{where}.description")
    _check_options(raw.get("options") or [], f"{where}.options", depth=0)


def _check_description(value: Any, where: str) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_DESCRIPTION:
        raise form_error(where, "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")


def _check_options(options: Sequence[Any], where: str, *, depth: int) -> None:
    if not isinstance(options, list) or len(options) > MAX_OPTIONS:
        raise form_error(where, "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
    seen_optional = False
    names: set[str] = set()
    for index, option in enumerate(options):
        at = f"{where}.{index}"
        if not isinstance(option, dict):
            raise form_error(at, "MODEL_TYPE_CONVERT", "Must be an object.")
        name = option.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name) or name != name.lower():
            raise form_error(f"{at}.name", "APPLICATION_COMMAND_INVALID_NAME", "Invalid name")
        if name in names:
            raise form_error(f"{at}.name", "APPLICATION_COMMAND_OPTIONS_NAME_ALREADY_EXISTS", "")
        names.add(name)
        _check_description(option.get("description"), f"{at}.description")
        kind = option.get("type")
        if kind in (SUB_COMMAND, SUB_COMMAND_GROUP):
            # A group holds subcommands; a subcommand holds values; two levels at most.
            if depth >= 2 or (depth == 1 and kind == SUB_COMMAND_GROUP):
                raise form_error(f"{at}.type", "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID", "")
            inner = option.get("options") or []
            if kind == SUB_COMMAND_GROUP and any(
                not isinstance(o, dict) or o.get("type") != SUB_COMMAND for o in inner
            ):
                raise form_error(f"{at}.options", "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID", "")
            _check_options(inner, f"{at}.options", depth=depth + 1)
            continue
        if not isinstance(kind, int) or not 3 <= kind <= 11:
            raise form_error(f"{at}.type", "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID", "")
        required = bool(option.get("required", False))
        if required and seen_optional:
            raise form_error(
                at, "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID", "Required options must be first"
            )
        seen_optional = seen_optional or not required
        choices = option.get("choices")
        if choices is not None:
            if option.get("autocomplete"):
                raise form_error(at, "APPLICATION_COMMAND_AUTOCOMPLETE_INVALID", "")
            if not isinstance(choices, list) or len(choices) > MAX_CHOICES:
                raise form_error(f"{at}.choices", "BASE_TYPE_MAX_LENGTH", "25 at most")
            for c_index, choice in enumerate(choices):
                if not isinstance(choice, dict) or not isinstance(choice.get("name"), str):
                    raise form_error(f"{at}.choices.{c_index}", "MODEL_TYPE_CONVERT", "")
                if not 1 <= len(choice["name"]) <= MAX_DESCRIPTION or "value" not in choice:
                    raise form_error(f"{at}.choices.{c_index}", "BASE_TYPE_BAD_LENGTH", "")
