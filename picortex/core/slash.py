"""The `/picortex` application command tree and reading slash interactions (SPEC 15).

Pure: the tree registered on READY (and its hash, so an unchanged tree is not registered
again), and an interaction's options turned into the same command values typed commands
parse to, so both go through one executor. Never raises on what a user typed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import orjson

from picortex.core import chat_settings as cs
from picortex.core import commands as cmds
from picortex.core import poll as polls
from picortex.core.trust import Tier
from picortex.types import Interaction, InteractionOption, Snowflake

COMMAND_NAME: Final = "picortex"

# Discord's application command option types.
SUB_COMMAND: Final = 1
SUB_COMMAND_GROUP: Final = 2
STRING: Final = 3
USER: Final = 6
CHANNEL: Final = 7
ROLE: Final = 8
SUBCOMMANDS: Final = frozenset({SUB_COMMAND, SUB_COMMAND_GROUP})
# Discord's application command type for slash commands, and the interaction contexts.
CHAT_INPUT: Final = 1
CONTEXT_GUILD: Final = 0
CONTEXT_BOT_DM: Final = 1
GUILD_INSTALL: Final = 0

# Interaction callback types.
CHANNEL_MESSAGE_WITH_SOURCE: Final = 4
DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: Final = 5
APPLICATION_COMMAND_AUTOCOMPLETE_RESULT: Final = 8
# Message flag: only the user who ran the command sees the answer.
EPHEMERAL: Final = 1 << 6
# Discord's limits: choices per option or autocomplete answer, characters of a choice name.
MAX_CHOICES: Final = 25
MAX_CHOICE_NAME: Final = 100
# `ask` text and a config value: long enough for a real question, within Discord's 6000.
MAX_TEXT: Final = 4000
# Discord's longest string option: a chat's agent prompt set by slash is at most this.
MAX_STRING_OPTION: Final = 6000
# Extra users `whitelist add|remove` take besides the required one.
EXTRA_USERS: Final = 4
HELP_TOPICS: Final = ("whitelist", "attention", "access", "config", "poll", "forget")
# Subcommands whose answer only the requester sees, whatever the response policy.
PRIVATE_SUBCOMMANDS: Final = frozenset({"forget"})
SHOW: Final = "show"


def _option(
    kind: int, name: str, description: str, *, required: bool = False, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "name": name, "description": description}
    if required:
        out["required"] = True
    out.update(extra)
    return out


def _choices(values: Sequence[str]) -> list[dict[str, str]]:
    return [{"name": v, "value": v} for v in values]


def _users(verb: str) -> list[dict[str, Any]]:
    first = _option(USER, "user", f"The user to {verb}", required=True)
    more = [_option(USER, f"user{n}", f"Another user to {verb}") for n in range(2, 2 + EXTRA_USERS)]
    return [first, *more]


def command_tree(*, global_scope: bool) -> list[dict[str, Any]]:
    """The application commands to bulk-overwrite: one `/picortex` chat-input command.

    Args:
        global_scope: a global command also says where it may be used (guilds and the
            bot's DMs); guild commands take no contexts.
    """
    sub = SUB_COMMAND
    modes = [*cmds.ATTENTION_MODES, cmds.USER_MODE_DEFAULT, SHOW]
    tiers = [t.label for t in (Tier.USER, Tier.TRUSTED, Tier.ADMIN)]
    options = [
        _option(
            sub,
            "ask",
            "Ask picortex something",
            options=[_option(STRING, "text", "Your question", required=True, max_length=MAX_TEXT)],
        ),
        _option(
            sub,
            "attention",
            "Show or change when and how picortex answers in this chat",
            options=[
                _option(
                    STRING,
                    "mode",
                    "The new attention mode (leave all empty to show the current settings)",
                    choices=_choices(modes),
                ),
                _option(USER, "user", "Set this user's own mode here (default: drop it)"),
                _option(
                    STRING,
                    "prompt",
                    "This chat's own agent prompt (reset: the owner's again)",
                    max_length=MAX_STRING_OPTION,
                ),
                _option(
                    STRING,
                    "model",
                    "This chat's discriminator model id (default: the configured one)",
                    max_length=cs.MODEL_MAX_CHARS,
                ),
                _option(
                    STRING,
                    "threshold",
                    "Confidence from 0 to 1 below which picortex stays quiet (default: none)",
                    max_length=20,
                ),
            ],
        ),
        _option(
            sub,
            "access",
            "Who and where picortex listens to, by role and channel",
            options=[
                _option(
                    STRING,
                    "action",
                    "What to change (leave empty to show the lists)",
                    choices=_choices([SHOW, *cmds.ACCESS_ACTIONS]),
                ),
                _option(ROLE, "role", "The role (allow-role, remove)"),
                _option(CHANNEL, "channel", "The channel (allow-channel, deny-channel, remove)"),
            ],
        ),
        _option(
            SUB_COMMAND_GROUP,
            "whitelist",
            "Who picortex answers",
            options=[
                _option(sub, "list", "Show the owner and the trusted users"),
                _option(
                    sub,
                    "add",
                    "Add users to the trust list",
                    options=[
                        *_users("add"),
                        _option(
                            STRING, "tier", "Their tier (default: user)", choices=_choices(tiers)
                        ),
                    ],
                ),
                _option(sub, "remove", "Take users off the trust list", options=_users("remove")),
            ],
        ),
        _option(
            SUB_COMMAND_GROUP,
            "config",
            "Runtime settings",
            options=[
                _option(
                    sub,
                    "get",
                    "Show one setting, or all of them",
                    options=[_option(STRING, "key", "The setting", autocomplete=True)],
                ),
                _option(
                    sub,
                    "set",
                    "Change a setting",
                    options=[
                        _option(STRING, "key", "The setting", required=True, autocomplete=True),
                        _option(
                            STRING, "value", "Its new value", required=True, max_length=MAX_TEXT
                        ),
                    ],
                ),
            ],
        ),
        _option(
            sub,
            "poll",
            "Start a poll answered with number reactions",
            options=[
                _option(
                    STRING,
                    "question",
                    "The question",
                    required=True,
                    max_length=polls.MAX_QUESTION_CHARS,
                ),
                *(
                    _option(
                        STRING,
                        f"option{n}",
                        f"Answer {n}",
                        required=n <= polls.MIN_OPTIONS,
                        max_length=polls.MAX_OPTION_CHARS,
                    )
                    for n in range(1, polls.MAX_OPTIONS + 1)
                ),
            ],
        ),
        _option(
            sub,
            "forget",
            "Delete what you (or, for admins, another user) said from picortex's memory",
            options=[_option(USER, "user", "Whom to forget (default: you)")],
        ),
        _option(
            sub,
            "help",
            "What picortex can do",
            options=[_option(STRING, "topic", "One command", choices=_choices(HELP_TOPICS))],
        ),
    ]
    command: dict[str, Any] = {
        "type": CHAT_INPUT,
        "name": COMMAND_NAME,
        "description": "Talk to picortex and manage it",
        "options": options,
    }
    if global_scope:
        command["contexts"] = [CONTEXT_GUILD, CONTEXT_BOT_DM]
        command["integration_types"] = [GUILD_INSTALL]
    return [command]


def tree_hash(application_id: Snowflake, scope: str, tree: Sequence[Mapping[str, Any]]) -> str:
    """A digest of what a registration sends where: a change of any of them registers again."""
    body = orjson.dumps(
        {"application_id": str(application_id), "scope": scope, "commands": list(tree)},
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(body).hexdigest()


# --- reading an interaction ----------------------------------------------------------


@attrs.frozen
class Ask:
    """`/picortex ask text`: a question for the model."""

    NAME = "ask"
    text: str


@attrs.frozen
class NotOurs:
    """An interaction for a command that is not `/picortex` (a stale registration)."""

    name: str


SlashAction = Ask | NotOurs | cmds.Command


def answer_is_private(name: str, *, trusted: bool, ok: bool, target: str) -> bool:
    """Whether a slash command's answer is for the requester's eyes only (ephemeral).

    A stranger's, a refusal or mistake (`ok` False), a sensitive command, and what the
    response policy sends to DMs (`target`) are private; an `ask` answer stays where it
    was asked. The one rule for the deferral (judged before the command runs, `ok` True)
    and for the answer.
    """
    if not trusted or not ok or name in PRIVATE_SUBCOMMANDS:
        return True
    return name != Ask.NAME and target == "dm"


def name_of(action: SlashAction) -> str | None:
    """The command an action is for, as the log names it (`ask`, `whitelist`...); None for a
    command that is not ours."""
    if isinstance(action, Ask):
        return Ask.NAME
    if isinstance(action, NotOurs):
        return None
    return cmds.command_name(action)


def _value(options: Sequence[InteractionOption], name: str) -> str | None:
    for option in options:
        if option.name == name and option.value is not None:
            return str(option.value).strip()
    return None


def _user_ids(options: Sequence[InteractionOption]) -> tuple[Snowflake, ...]:
    ids: list[Snowflake] = []
    for option in options:
        if option.type == USER and option.value is not None:
            parsed = cmds.parse_user_ids(str(option.value))
            if parsed:
                ids.extend(i for i in parsed if i not in ids)
    return tuple(ids)


def _sub(options: Sequence[InteractionOption]) -> InteractionOption | None:
    for option in options:
        if option.type in (SUB_COMMAND, SUB_COMMAND_GROUP):
            return option
    return None


def action_for(interaction: Interaction) -> SlashAction:
    """What a `/picortex` interaction asks for, as the command value a typed command gives."""
    if interaction.command_name != COMMAND_NAME:
        return NotOurs(interaction.command_name)
    sub = _sub(interaction.options)
    if sub is None:
        return cmds.Help()
    args = sub.options
    name = sub.name
    if name == "ask":
        text = (_value(args, "text") or "")[:MAX_TEXT]
        if not text:
            return cmds.Invalid("ask", "Ask something: `/picortex ask text:...`.")
        return Ask(text)
    if name == "attention":
        return _attention(args)
    if name == "access":
        return _access(args)
    if name == "whitelist":
        return _whitelist(_sub(args))
    if name == "config":
        return _config(_sub(args))
    if name == "poll":
        return _poll(args)
    if name == "forget":
        users = _user_ids(args)
        return cmds.Forget(users) if users else cmds.Forget(me=True)
    if name == "help":
        topic = _value(args, "topic")
        return cmds.Help(topic if topic in HELP_TOPICS else None)
    return cmds.Unknown(name)


def _attention(args: Sequence[InteractionOption]) -> cmds.Command:
    users = _user_ids(args)
    if users:
        mode = _value(args, "mode")
        if any(_value(args, n) is not None for n in cs.FIELDS):
            return cmds.Invalid("attention", "Set a user's own mode alone, without the others.")
        if mode is None or mode == SHOW:
            return cmds.Invalid("attention", "Choose the user's mode, or default.")
        return cmds.AttentionUser(users, None if mode == cmds.USER_MODE_DEFAULT else mode)
    given = [(n, v) for n in ("mode", *cs.FIELDS) if (v := _value(args, n)) is not None]
    if len(given) > 1:
        return cmds.Invalid("attention", "Give one of mode, prompt, model or threshold at a time.")
    if not given or given[0] == ("mode", SHOW):
        return cmds.AttentionShow()
    name, text = given[0]
    if name == "mode":
        return cmds.parse_command(f"attention {text}")
    parsed = cs.parse(cs.FIELDS[cs.FIELDS.index(name)], text)
    return parsed if isinstance(parsed, cs.ChatSettingSet) else cmds.Invalid("attention", parsed)


def _whitelist(sub: InteractionOption | None) -> cmds.Command:
    if sub is None or sub.name == "list":
        return cmds.WhitelistList() if sub is not None else cmds.WhitelistHelp()
    users = _user_ids(sub.options)
    if not users:
        return cmds.Invalid("whitelist", "Name at least one user.")
    if sub.name == "add":
        tier = Tier.parse(_value(sub.options, "tier") or "user")
        if tier is None:
            return cmds.Invalid("whitelist", "The tier must be user, trusted or admin.")
        return cmds.WhitelistAdd(users, tier)
    if sub.name == "remove":
        return cmds.WhitelistRemove(users)
    return cmds.WhitelistHelp()


def _access(args: Sequence[InteractionOption]) -> cmds.Command:
    action = _value(args, "action")
    if action is None or action == SHOW:
        return cmds.AccessShow()
    ids = " ".join(v for v in (_value(args, "role"), _value(args, "channel")) if v)
    return cmds.parse_command(f"access {action} {ids}")


def _config(sub: InteractionOption | None) -> cmds.Command:
    if sub is None:
        return cmds.Invalid("config", "Use `config get` or `config set`.")
    key = _value(sub.options, "key")
    if sub.name == "get":
        return cmds.ConfigGet(key.lower() if key else None)
    if sub.name == "set":
        value = _value(sub.options, "value")
        if not key or value is None:
            return cmds.Invalid("config", "Give a key and a value.")
        return cmds.ConfigSet(key.lower(), value)
    return cmds.Invalid("config", "Use `config get` or `config set`.")


def _poll(args: Sequence[InteractionOption]) -> cmds.Command:
    question = _value(args, "question") or ""
    answers = [
        a for a in (_value(args, f"option{n}") for n in range(1, polls.MAX_OPTIONS + 1)) if a
    ]
    parsed = polls.check_poll(question, answers)
    if isinstance(parsed, polls.PollError):
        return cmds.Invalid("poll", parsed.message)
    return cmds.PollStart(parsed.question, parsed.options)


def focused_option(interaction: Interaction) -> InteractionOption | None:
    """The option being typed in an autocomplete interaction, at any depth."""
    stack = list(interaction.options)
    while stack:
        option = stack.pop()
        if option.focused:
            return option
        stack.extend(option.options)
    return None


def autocomplete_choices(interaction: Interaction, keys: Sequence[str]) -> list[dict[str, str]]:
    """Choices for an autocomplete interaction: config keys starting with (else containing)
    what was typed so far; nothing for other options."""
    option = focused_option(interaction)
    if option is None or option.name != "key":
        return []
    typed = str(option.value or "").strip().lower()
    starting = [k for k in keys if k.startswith(typed)]
    inside = [k for k in keys if typed in k and k not in starting]
    return _choices([k[:MAX_CHOICE_NAME] for k in (starting + inside)[:MAX_CHOICES]])


def render_action(action: SlashAction) -> str:
    """The command as text, for the action log and the trigger log."""
    if isinstance(action, Ask):
        return f"ask {action.text}"
    if isinstance(action, NotOurs):
        return action.name
    return cmds.render_command(action)
