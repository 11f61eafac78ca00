"""Chat commands (SPEC 5 step 3, SPEC 6): detect, parse and execute them; never raise on input.

Flow: `find_command_text` -> `parse_command` -> `execute` -> post the reply, apply `changes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final

import attrs

from picortex.core import chat_settings as cs
from picortex.core import poll as polls
from picortex.core.trust import Tier, may_run, required_tier
from picortex.errors import ConfigError
from picortex.types import Message, Snowflake

SLASH_PREFIX: Final = "/picortex"
ATTENTION_MODES: Final[tuple[str, ...]] = (
    "always",
    "mentions-only",
    "discriminate",
    "discriminate-quiet",
    "silent",
)
# Snowflakes are unsigned 64-bit in Discord but stored in SQLite's signed INTEGER; real ids
# are far below this bound, so anything above it is a typo, not a user.
_MAX_USER_ID: Final = 2**63 - 1
# How much of a user's word we echo back in an error: enough to recognise, never a wall.
_ECHO_CHARS: Final = 40

_LEADING_MENTION: Final = re.compile(r"<@!?([0-9]{1,20})>\s*")
_MENTIONS: Final = re.compile(r"(?:<@!?[0-9]{1,20}>)+")
_MENTION_ID: Final = re.compile(r"<@!?([0-9]{1,20})>")
_RAW_ID: Final = re.compile(r"[0-9]{1,20}")
_ARG_SPLIT: Final = re.compile(r"[\s,]+")
_WORD: Final = re.compile(r"\s*(\S*)\s*(.*)", re.DOTALL)
_ADD_USAGE: Final = "whitelist add @user.. [user|trusted|admin]"
_POLLS_OFF: Final = "Polls are turned off here (`poll_enabled` is false)."
# Config sections that move money or change who hears what: the owner's alone (SPEC 6).
OWNER_CONFIG_PREFIXES: Final[tuple[str, ...]] = (
    "agent.",
    "budget.",
    "models.",
    "prices.",
    "response_policy.",
)
_OWNER_ONLY_ADMIN: Final = "Only the owner can grant or revoke `admin`."
USER_MODE_DEFAULT: Final = "default"
# `access` verbs -> the `[access]` list each adds to (`remove` takes ids off every list).
ACCESS_LISTS: Final[Mapping[str, str]] = {
    "allow-role": "access.allow_roles",
    "allow-channel": "access.allow_channels",
    "deny-channel": "access.deny_channels",
}
ACCESS_ACTIONS: Final[tuple[str, ...]] = (*ACCESS_LISTS, "remove")
_ACCESS_ID: Final = re.compile(r"<(?:@&|#)([0-9]{1,20})>|([0-9]{1,20})")
_ACCESS_USAGE: Final = (
    "access show | allow-role ROLE.. | allow-channel #channel.. | deny-channel #channel.."
    " | remove ID.."
)


# --- command values ------------------------------------------------------------------


@attrs.frozen
class WhitelistList:
    """`whitelist list`: show the owner and the trust list."""

    NAME: ClassVar[str] = "whitelist"


@attrs.frozen
class WhitelistAdd:
    """`whitelist add @user.. [tier]`: give users a tier (default `user`)."""

    NAME: ClassVar[str] = "whitelist"
    user_ids: tuple[Snowflake, ...]
    tier: Tier = Tier.USER


@attrs.frozen
class WhitelistRemove:
    """`whitelist remove @user..`: take users off the trust list."""

    NAME: ClassVar[str] = "whitelist"
    user_ids: tuple[Snowflake, ...]


@attrs.frozen
class WhitelistHelp:
    """A bare `whitelist` or `whitelist help`."""

    NAME: ClassVar[str] = "whitelist"


@attrs.frozen
class AttentionSet:
    """`attention MODE`: change the chat's attention mode."""

    NAME: ClassVar[str] = "attention"
    mode: str


@attrs.frozen
class AttentionShow:
    """`attention show` (or a bare `attention`): the mode and the discriminator prompt path."""

    NAME: ClassVar[str] = "attention"


@attrs.frozen
class AttentionUser:
    """`attention user @user.. MODE|default`: users' own mode in this chat (SPEC 18);
    `default` (mode None) drops it, so the chat's mode applies to them again."""

    NAME: ClassVar[str] = "attention"
    user_ids: tuple[Snowflake, ...]
    mode: str | None


@attrs.frozen
class AccessShow:
    """`access show` (or a bare `access`): the `[access]` lists (SPEC 18)."""

    NAME: ClassVar[str] = "access"


@attrs.frozen
class AccessEdit:
    """`access allow-role|allow-channel|deny-channel ID..` adds ids to one `[access]` list;
    `access remove ID..` takes them off every list."""

    NAME: ClassVar[str] = "access"
    action: str  # one of ACCESS_ACTIONS
    ids: tuple[Snowflake, ...]


@attrs.frozen
class ConfigGet:
    """`config get [KEY]`: one runtime setting, or all of them."""

    NAME: ClassVar[str] = "config"
    key: str | None = None


@attrs.frozen
class ConfigSet:
    """`config set KEY VALUE`: change a runtime setting (validated when executed)."""

    NAME: ClassVar[str] = "config"
    key: str
    value: str


@attrs.frozen
class PollStart:
    """`poll ...` with a valid question and 2-4 options."""

    NAME: ClassVar[str] = "poll"
    question: str
    options: tuple[str, ...]


@attrs.frozen
class PollHelp:
    """A bare `poll` or `poll help`."""

    NAME: ClassVar[str] = "poll"


@attrs.frozen
class Forget:
    """`forget @user..` (admin) or `forget me`: delete what someone said from memory (SPEC 8).

    `me` stands for the requester, so `forget me` works for anyone whose words are stored.
    """

    NAME: ClassVar[str] = "forget"
    user_ids: tuple[Snowflake, ...] = ()
    me: bool = False


@attrs.frozen
class Speak:
    """`speak ...`: voice is not available, so the answer says so."""

    NAME: ClassVar[str] = "speak"
    text: str = ""


@attrs.frozen
class Stay:
    """`stay ...`: voice is not available, so the answer says so."""

    NAME: ClassVar[str] = "stay"
    text: str = ""


@attrs.frozen
class Help:
    """`help [TOPIC]`, or the wakeword alone."""

    NAME: ClassVar[str] = "help"
    topic: str | None = None


@attrs.frozen
class Unknown:
    """A command word we do not know; answered with a short help."""

    NAME: ClassVar[str] = "unknown"
    word: str


@attrs.frozen
class Invalid:
    """A known command used wrongly; `error` is one sentence for the user."""

    NAME: ClassVar[str] = "invalid"
    command: str
    error: str


Command = (
    WhitelistList
    | WhitelistAdd
    | WhitelistRemove
    | WhitelistHelp
    | AttentionSet
    | AttentionShow
    | AttentionUser
    | AccessShow
    | AccessEdit
    | cs.ChatSettingSet
    | ConfigGet
    | ConfigSet
    | PollStart
    | PollHelp
    | Forget
    | Speak
    | Stay
    | Help
    | Unknown
    | Invalid
)


def command_name(command: Command) -> str:
    """The command's name for permissions, the response policy and the log (`whitelist`...)."""
    if isinstance(command, Invalid):
        return command.command
    return command.NAME


# --- detection -----------------------------------------------------------------------


def _after_bot_mention(content: str, bot_user_id: Snowflake | None) -> str | None:
    """The text after a leading mention of the bot and any spaces; None without one."""
    if bot_user_id is None:
        return None
    match = _LEADING_MENTION.match(content)
    if match is None or int(match.group(1)) != bot_user_id:
        return None
    return content[match.end() :]


def _after_prefix(text: str, prefix: str) -> str | None:
    """The text after `prefix` and at least one whitespace character, matched case-free."""
    n = len(prefix)
    if n == 0 or len(text) <= n or not text[n].isspace():
        return None
    if text[:n].lower() != prefix.lower():
        return None
    return text[n + 1 :].strip()


def find_command_text(
    content: str, *, wakeword: str, bot_user_id: Snowflake | None, require_mention: bool
) -> str | None:
    """The command text of a message (after the prefix, stripped), or None if not a command.

    A command starts with the wakeword or `/picortex`, then whitespace (the prefix matches
    case-insensitively). When `require_mention` (guild channels and group DMs) the message
    must start with a mention of the bot (`<@ID>` or `<@!ID>`, optional spaces) first; in a
    1:1 DM such a mention is allowed but not needed. `!s` alone is the help command (`""`).
    """
    text = content
    rest = _after_bot_mention(content, bot_user_id)
    if rest is not None:
        text = rest
    elif require_mention:
        return None
    for prefix in (wakeword, SLASH_PREFIX):
        found = _after_prefix(text, prefix)
        if found is not None:
            return found
    return None


def detect_command(
    message: Message,
    *,
    wakeword: str,
    bot_user_id: Snowflake | None,
    group_dm: bool = False,
) -> str | None:
    """`find_command_text` for a message; a mention is required outside 1:1 DMs."""
    return find_command_text(
        message.content,
        wakeword=wakeword,
        bot_user_id=bot_user_id,
        require_mention=message.guild_id is not None or group_dm,
    )


def strip_mention(content: str, bot_user_id: Snowflake | None) -> str:
    """The content without a leading mention of the bot (and the spaces after it)."""
    rest = _after_bot_mention(content, bot_user_id)
    return content if rest is None else rest


# --- parsing -------------------------------------------------------------------------


def _take_word(text: str) -> tuple[str, str]:
    """The first whitespace-delimited word and the rest (leading spaces removed)."""
    match = _WORD.match(text)
    if match is None:  # pragma: no cover - the pattern matches every string
        return "", ""
    return match.group(1), match.group(2)


def _echo(word: str) -> str:
    """A user's word, safe to put inside inline code in a reply."""
    clean = word.replace("`", "'")
    if len(clean) > _ECHO_CHARS:
        clean = clean[: _ECHO_CHARS - 1] + "\u2026"
    return clean


def parse_user_ids(token: str) -> tuple[Snowflake, ...] | None:
    """The user ids in one token: `<@id>`, `<@!id>` (several may touch) or a raw id."""
    ids: list[int]
    if _MENTIONS.fullmatch(token):
        ids = [int(m) for m in _MENTION_ID.findall(token)]
    elif _RAW_ID.fullmatch(token):
        ids = [int(token)]
    else:
        return None
    if not all(0 < i <= _MAX_USER_ID for i in ids):
        return None
    return tuple(ids)


def _dedupe(ids: Sequence[Snowflake]) -> tuple[Snowflake, ...]:
    return tuple(dict.fromkeys(ids))


def parse_command(text: str) -> Command:
    """Parse command text (what follows the prefix); never raises."""
    word, rest = _take_word(text)
    name = word.lower()
    if name == "":
        return Help()
    if name == "whitelist":
        return _parse_whitelist(rest)
    if name == "attention":
        return _parse_attention(rest)
    if name == "config":
        return _parse_config(rest)
    if name == "access":
        return _parse_access(rest)
    if name == "poll":
        parsed = polls.parse_poll(rest)
        if isinstance(parsed, polls.Poll):
            return PollStart(parsed.question, parsed.options)
        if isinstance(parsed, polls.PollHelp):
            return PollHelp()
        return Invalid("poll", parsed.message)
    if name == "forget":
        return _parse_forget(rest)
    if name == "speak":
        return Speak(rest.strip())
    if name == "stay":
        return Stay(rest.strip())
    if name == "help":
        topic, _ = _take_word(rest)
        return Help(topic.lower() or None)
    return Unknown(word)


def _parse_whitelist(rest: str) -> Command:
    sub, args = _take_word(rest)
    sub = sub.lower()
    if sub in ("", "help"):
        return WhitelistHelp()
    if sub == "list":
        return WhitelistList()
    if sub not in ("add", "remove"):
        return Invalid(
            "whitelist", f"Unknown whitelist command `{_echo(sub)}`: use list, add, remove or help."
        )
    tokens = [t for t in _ARG_SPLIT.split(args) if t]
    ids: list[Snowflake] = []
    tier = Tier.USER
    for i, token in enumerate(tokens):
        found = parse_user_ids(token)
        if found is not None:
            ids.extend(found)
            continue
        last = i == len(tokens) - 1
        if sub == "add" and last:
            parsed = Tier.parse(token)
            if parsed is not None:
                tier = parsed
                continue
            if ids:
                return Invalid(
                    "whitelist", f"Unknown tier `{_echo(token)}`: use user, trusted or admin."
                )
        if sub == "add" and Tier.parse(token) is not None:
            return Invalid("whitelist", f"Put the tier last: `{_ADD_USAGE}`.")
        return Invalid("whitelist", f"`{_echo(token)}` is not a user mention or a user id.")
    if not ids:
        usage = _ADD_USAGE if sub == "add" else "whitelist remove @user.."
        return Invalid("whitelist", f"Name at least one user, by mention or id: `{usage}`.")
    if sub == "add":
        return WhitelistAdd(_dedupe(ids), tier)
    return WhitelistRemove(_dedupe(ids))


def _parse_forget(rest: str) -> Command:
    tokens = [t for t in _ARG_SPLIT.split(rest) if t]
    ids: list[Snowflake] = []
    me = False
    for token in tokens:
        if token.lower() == "me":
            me = True
            continue
        found = parse_user_ids(token)
        if found is None:
            return Invalid("forget", f"`{_echo(token)}` is not a user mention or a user id.")
        ids.extend(found)
    if not ids and not me:
        return Invalid("forget", "Say whom to forget: `forget me` or `forget @user..`.")
    return Forget(_dedupe(ids), me)


def _parse_attention(rest: str) -> Command:
    mode, value = _take_word(rest)
    mode = mode.lower()
    if mode == "user":
        return _parse_attention_user(value)
    if mode in ("", "show"):
        return AttentionShow()
    for field in cs.FIELDS:  # prompt, model, threshold: the chat's own settings
        if mode == field:
            parsed = cs.parse(field, value)
            return parsed if isinstance(parsed, cs.ChatSettingSet) else Invalid("attention", parsed)
    if mode in ATTENTION_MODES:
        return AttentionSet(mode)
    return Invalid(
        "attention",
        f"Unknown attention mode `{_echo(mode)}`: use {', '.join(ATTENTION_MODES)}, show, user, "
        f"{', '.join(cs.FIELDS)}.",
    )


def _parse_attention_user(args: str) -> Command:
    usage = f"`attention user @user.. {'|'.join(ATTENTION_MODES)}|{USER_MODE_DEFAULT}`"
    tokens = [t for t in _ARG_SPLIT.split(args) if t]
    if not tokens:
        return Invalid("attention", f"Name users and a mode: {usage}.")
    mode = tokens[-1].lower()
    if mode not in (*ATTENTION_MODES, USER_MODE_DEFAULT):
        return Invalid("attention", f"Put a mode last: {usage}.")
    ids: list[Snowflake] = []
    for token in tokens[:-1]:
        found = parse_user_ids(token)
        if found is None:
            return Invalid("attention", f"`{_echo(token)}` is not a user mention or a user id.")
        ids.extend(found)
    if not ids:
        return Invalid("attention", f"Name at least one user, by mention or id: {usage}.")
    return AttentionUser(_dedupe(ids), None if mode == USER_MODE_DEFAULT else mode)


def _parse_access(rest: str) -> Command:
    sub, args = _take_word(rest)
    sub = sub.lower()
    if sub in ("", "show"):
        return AccessShow()
    if sub not in ACCESS_ACTIONS:
        return Invalid("access", f"Unknown access command `{_echo(sub)}`: `{_ACCESS_USAGE}`.")
    ids: list[Snowflake] = []
    for token in (t for t in _ARG_SPLIT.split(args) if t):
        match = _ACCESS_ID.fullmatch(token)
        number = int(match.group(1) or match.group(2)) if match else 0
        if not 0 < number <= _MAX_USER_ID:
            return Invalid("access", f"`{_echo(token)}` is not a role or channel id or mention.")
        ids.append(number)
    if not ids:
        return Invalid("access", f"Name at least one role or channel: `{_ACCESS_USAGE}`.")
    return AccessEdit(sub, _dedupe(ids))


def _unquote(value: str) -> str:
    """Drop one pair of matching quotes around a value (`"!x"` -> `!x`)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _parse_config(rest: str) -> Command:
    sub, args = _take_word(rest)
    sub = sub.lower()
    if sub in ("", "get"):
        key, _ = _take_word(args)
        return ConfigGet(key.lower() or None)
    if sub == "set":
        key, value = _take_word(args)
        value = value.strip()
        if not key or not value:
            return Invalid("config", "Give a key and a value: `config set KEY VALUE`.")
        return ConfigSet(key.lower(), _unquote(value))
    return Invalid("config", f"Unknown config command `{_echo(sub)}`: use get or set.")


def render_command(command: Command) -> str:
    """Command text that `parse_command` reads back as `command` (for valid commands)."""
    if isinstance(command, WhitelistList):
        return "whitelist list"
    if isinstance(command, WhitelistAdd):
        users = " ".join(f"<@{i}>" for i in command.user_ids)
        return f"whitelist add {users} {command.tier.label}"
    if isinstance(command, WhitelistRemove):
        return "whitelist remove " + " ".join(f"<@{i}>" for i in command.user_ids)
    if isinstance(command, WhitelistHelp):
        return "whitelist help"
    if isinstance(command, AttentionSet):
        return f"attention {command.mode}"
    if isinstance(command, AttentionShow):
        return "attention show"
    if isinstance(command, AttentionUser):
        users = " ".join(f"<@{i}>" for i in command.user_ids)
        return f"attention user {users} {command.mode or USER_MODE_DEFAULT}"
    if isinstance(command, AccessShow):
        return "access show"
    if isinstance(command, AccessEdit):
        return f"access {command.action} " + " ".join(str(i) for i in command.ids)
    if isinstance(command, cs.ChatSettingSet):
        return cs.render(command)
    if isinstance(command, ConfigGet):
        return "config get" + (f" {command.key}" if command.key else "")
    if isinstance(command, ConfigSet):
        value = command.value
        if _unquote(value) != value:
            value = f'"{value}"'
        return f"config set {command.key} {value}"
    if isinstance(command, PollStart):
        return f'poll "{command.question}" ' + " // ".join(command.options)
    if isinstance(command, PollHelp):
        return "poll"
    if isinstance(command, Forget):
        who = ["me"] if command.me else []
        return " ".join(["forget", *who, *(f"<@{i}>" for i in command.user_ids)])
    if isinstance(command, Speak | Stay):
        return f"{command.NAME} {command.text}".strip()
    if isinstance(command, Help):
        return "help" + (f" {command.topic}" if command.topic else "")
    if isinstance(command, Unknown):
        return command.word
    return command.command


# --- execution -----------------------------------------------------------------------


@attrs.frozen
class TrustChange:
    """Set `user_id`'s tier, or remove them from the trust list when `tier` is None."""

    user_id: Snowflake
    tier: Tier | None


@attrs.frozen
class ConfigChange:
    """Persist runtime setting `key` as `value` (canonical text), then reload the settings."""

    key: str
    value: str


@attrs.frozen
class AttentionChange:
    """Set the chat's attention mode."""

    mode: str


@attrs.frozen
class UserAttentionChange:
    """Set `user_id`'s own attention mode in the chat, or drop it when `mode` is None."""

    user_id: Snowflake
    mode: str | None


@attrs.frozen
class StartPoll:
    """Seed one number reaction per option on the posted reply, tally after `poll_seconds`."""

    question: str
    options: tuple[str, ...]


@attrs.frozen
class ForgetUser:
    """Delete `user_id`'s stored messages and the observations of their words, at once."""

    user_id: Snowflake


@attrs.frozen
class Forgotten:
    """What forgetting one person deleted."""

    user_id: Snowflake
    messages: int
    observations: int


Change = (
    TrustChange
    | ConfigChange
    | AttentionChange
    | UserAttentionChange
    | cs.ChatSettingChange
    | StartPoll
    | ForgetUser
)


@attrs.frozen
class CommandResult:
    """What a command does: the reply to post, the changes to apply, and whether it worked.

    `outcome` is `ok`, `error` (bad input or nothing to do) or `denied` (tier too low).
    """

    reply: str
    changes: tuple[Change, ...] = ()
    outcome: str = "ok"

    @property
    def ok(self) -> bool:
        """True when the command did what was asked."""
        return self.outcome == "ok"


def _error(text: str) -> CommandResult:
    return CommandResult(text, (), "error")


def help_text(wakeword: str, topic: str | None = None) -> str:
    """The short help, or the help for one command when `topic` names one."""
    if topic == "whitelist":
        return whitelist_help(wakeword)
    if topic == "poll":
        return polls.POLL_HELP
    if topic == "attention":
        modes = "|".join(ATTENTION_MODES)
        return (
            f"`{wakeword} attention {modes}` sets this chat's mode; "
            f"`{wakeword} attention show` shows it all; "
            f"`{wakeword} attention user @user.. {modes}|{USER_MODE_DEFAULT}` sets a user's "
            "own mode here; "
            f"`{wakeword} attention prompt TEXT|reset`, `{wakeword} attention model ID|default` "
            f"and `{wakeword} attention threshold 0-1|default` set its own agent prompt, "
            "discriminator model and confidence threshold."
        )
    if topic == "access":
        return (
            f"`{wakeword} access show` shows who and where I listen to; "
            f"`{wakeword} access allow-role ROLE..` lets members with a role in (as user tier), "
            f"`{wakeword} access allow-channel #channel..` limits me to those channels, "
            f"`{wakeword} access deny-channel #channel..` silences me there, "
            f"`{wakeword} access remove ID..` takes ids off every list."
        )
    if topic == "config":
        return (
            f"`{wakeword} config get [KEY]` reads settings; "
            f"`{wakeword} config set KEY VALUE` changes one."
        )
    if topic == "forget":
        return (
            f"`{wakeword} forget me` deletes what you said from my memory; "
            f"`{wakeword} forget @user..` (admin) deletes what they said."
        )
    return (
        f"Commands (start with `{wakeword} `): whitelist list|add|remove|help, "
        "attention MODE|show|user|prompt|model|threshold, "
        "access show|allow-role|allow-channel|deny-channel|remove, "
        "config get|set, poll, forget me|@user, speak, stay, help."
    )


def whitelist_help(wakeword: str) -> str:
    """Usage of the whitelist command."""
    return "\n".join(
        (
            f"`{wakeword} whitelist list`: show the owner and the trusted users.",
            f"`{wakeword} whitelist add @user.. [user|trusted|admin]`: add users "
            "(default tier: user).",
            f"`{wakeword} whitelist remove @user..`: remove users (the owner always stays).",
            "Mentions and raw user ids both work.",
        )
    )


def _users(ids: Sequence[Snowflake]) -> str:
    return ", ".join(f"<@{i}>" for i in ids)


def execute_whitelist(
    command: WhitelistList | WhitelistAdd | WhitelistRemove | WhitelistHelp,
    *,
    trust: Mapping[int, str],
    owner_id: Snowflake | None,
    wakeword: str,
) -> CommandResult:
    """Run a whitelist command against the current trust list (`user id -> tier name`)."""
    if isinstance(command, WhitelistHelp):
        return CommandResult(whitelist_help(wakeword))
    if isinstance(command, WhitelistList):
        return CommandResult(_format_trust_list(trust, owner_id))
    if isinstance(command, WhitelistAdd):
        return _add(command, trust, owner_id)
    return _remove(command, trust, owner_id)


def _format_trust_list(trust: Mapping[int, str], owner_id: Snowflake | None) -> str:
    lines = ["Trust list:"]
    if owner_id is not None:
        lines.append(f"- <@{owner_id}>: admin (owner)")
    listed = sorted(
        ((uid, Tier.parse(label)) for uid, label in trust.items() if uid != owner_id),
        key=lambda item: (-(item[1] or 0), item[0]),
    )
    lines += [f"- <@{uid}>: {tier.label if tier else 'unknown tier'}" for uid, tier in listed]
    if len(lines) == 1:
        return "The trust list is empty and no owner is set."
    if not listed:
        lines.append("No one else is on the list yet.")
    return "\n".join(lines)


def _add(
    command: WhitelistAdd, trust: Mapping[int, str], owner_id: Snowflake | None
) -> CommandResult:
    label = command.tier.label
    added: list[Snowflake] = []
    changed: list[Snowflake] = []
    unchanged: list[Snowflake] = []
    owner_note = ""
    for uid in command.user_ids:
        if uid == owner_id:
            owner_note = f"<@{uid}> is the owner and always admin."
        elif uid not in trust:
            added.append(uid)
        elif Tier.parse(trust[uid]) == command.tier:
            unchanged.append(uid)
        else:
            changed.append(uid)
    sentences = [
        f"{verb} {_users(ids)}."
        for verb, ids in (
            (f"Added as {label}:", added),
            (f"Changed to {label}:", changed),
            (f"Already {label}:", unchanged),
        )
        if ids
    ]
    if owner_note:
        sentences.append(owner_note)
    changes = tuple(TrustChange(uid, command.tier) for uid in [*added, *changed])
    outcome = "ok" if added or changed or unchanged else "error"
    return CommandResult(" ".join(sentences), changes, outcome)


def _remove(
    command: WhitelistRemove, trust: Mapping[int, str], owner_id: Snowflake | None
) -> CommandResult:
    removed: list[Snowflake] = []
    missing: list[Snowflake] = []
    sentences: list[str] = []
    for uid in command.user_ids:
        if uid == owner_id:
            sentences.append("The owner cannot be removed.")
        elif uid in trust:
            removed.append(uid)
        else:
            missing.append(uid)
    if missing:
        sentences.insert(0, f"Not on the list: {_users(missing)}.")
    if removed:
        sentences.insert(0, f"Removed {_users(removed)}.")
    changes = tuple(TrustChange(uid, None) for uid in removed)
    return CommandResult(" ".join(sentences), changes, "ok" if removed else "error")


def execute_attention(
    command: AttentionSet | AttentionShow,
    *,
    current_mode: str,
    prompt_path: str,
    user_modes: Mapping[int, str] | None = None,
    access_note: str | None = None,
    chat_note: str = "",
) -> CommandResult:
    """Show or change the chat's attention mode.

    Args:
        user_modes: users' own modes in this chat (user id -> mode), shown by `show`.
        access_note: why `[access]` silences this chat, if it does, shown by `show`.
        chat_note: the chat's own prompt, discriminator model and threshold, shown by `show`.
    """
    if isinstance(command, AttentionShow):
        first = f"Attention mode: `{current_mode}`. Discriminator prompt: `{prompt_path}`."
        lines = [f"{first} {chat_note}".rstrip()]
        if access_note:
            lines.append(f"Silent here whatever the mode: the {access_note}.")
        if user_modes:
            own = ", ".join(f"<@{uid}>: `{mode}`" for uid, mode in sorted(user_modes.items()))
            lines.append(f"Users' own modes here: {own}.")
        return CommandResult("\n".join(lines))
    if command.mode == current_mode:
        return CommandResult(f"Attention mode is already `{command.mode}`.")
    return CommandResult(
        f"Attention mode is now `{command.mode}` (was `{current_mode}`).",
        (AttentionChange(command.mode),),
    )


def execute_attention_user(
    command: AttentionUser, *, user_modes: Mapping[int, str]
) -> CommandResult:
    """Set or drop users' own attention modes in this chat."""
    changes = tuple(
        UserAttentionChange(uid, command.mode)
        for uid in command.user_ids
        if user_modes.get(uid) != command.mode
    )
    users = _users(command.user_ids)
    if command.mode is None:
        if not changes:
            return _error(f"{users}: no own mode here; the chat's mode already applies.")
        return CommandResult(
            f"{_users([c.user_id for c in changes])}: the chat's mode applies again.", changes
        )
    if not changes:
        return CommandResult(f"{users}: own mode here is already `{command.mode}`.")
    return CommandResult(
        f"{_users([c.user_id for c in changes])}: own mode here is now `{command.mode}`.",
        changes,
    )


def _access_ids(values: Mapping[str, str], key: str) -> list[int]:
    return [int(part) for part in _ARG_SPLIT.split(values.get(key, "")) if part.isdigit()]


def execute_access(
    command: AccessShow | AccessEdit,
    *,
    values: Mapping[str, str],
    format_value: Callable[[object], str],
) -> CommandResult:
    """Show or change the `[access]` lists; changes are runtime config (`access.*`).

    Args:
        values: every runtime key -> its current value as text (`access.*` among them).
        format_value: renders a list of ids as the canonical text to store.
    """
    roles = _access_ids(values, "access.allow_roles")
    allowed = _access_ids(values, "access.allow_channels")
    denied = _access_ids(values, "access.deny_channels")
    if isinstance(command, AccessShow):

        def listed(ids: Sequence[int], mention: str) -> str:
            return ", ".join(mention.format(i) for i in ids) or "none"

        return CommandResult(
            "\n".join(
                (
                    f"Roles that count as user tier: {listed(roles, '<@&{}>')}.",
                    "Channels I listen in: "
                    + (listed(allowed, "<#{}>") if allowed else "every channel")
                    + ".",
                    f"Channels where I stay silent: {listed(denied, '<#{}>')}.",
                )
            )
        )
    current = {
        "access.allow_roles": roles,
        "access.allow_channels": allowed,
        "access.deny_channels": denied,
    }
    if command.action == "remove":
        keys = list(current)
        wanted = {key: [i for i in ids if i not in command.ids] for key, ids in current.items()}
    else:
        keys = [ACCESS_LISTS[command.action]]
        wanted = {keys[0]: list(dict.fromkeys([*current[keys[0]], *command.ids]))}
    changes = tuple(
        ConfigChange(key, format_value(tuple(wanted[key])))
        for key in keys
        if wanted[key] != current[key]
    )
    if not changes:
        what = "on no list" if command.action == "remove" else "already listed"
        return _error(f"Nothing changed: {', '.join(map(str, command.ids))} {what}.")
    done = "; ".join(f"`{c.key}` is now `{c.value or 'empty'}`" for c in changes)
    return CommandResult(f"{done}.", changes)


def execute_config(
    command: ConfigGet | ConfigSet,
    *,
    values: Mapping[str, str],
    parse_value: Callable[[str, str], object],
    format_value: Callable[[object], str],
) -> CommandResult:
    """Read or change runtime settings.

    Args:
        values: every runtime key -> its current value as text (the keys settable at runtime).
        parse_value: validates a new value (`config.parse_runtime_value`; raises ConfigError).
        format_value: renders a parsed value as the canonical text to store.
    """
    if isinstance(command, ConfigGet):
        if command.key is None:
            body = "\n".join(f"{key} = {values[key]}" for key in sorted(values))
            return CommandResult(f"```\n{body}\n```" if body else "No runtime settings.")
        if command.key not in values:
            return _error(f"Unknown config key `{_echo(command.key)}`; `config get` lists them.")
        return CommandResult(f"`{command.key}` = `{values[command.key]}`")
    if command.key not in values:
        return _error(f"Unknown config key `{_echo(command.key)}`; `config get` lists them.")
    try:
        text = format_value(parse_value(command.key, command.value))
    except (ConfigError, ValueError, TypeError) as exc:
        reason = str(exc).strip() or "that value is not valid"
        return _error(f"Could not set `{command.key}`: {reason}")
    return CommandResult(f"`{command.key}` is now `{text}`.", (ConfigChange(command.key, text),))


def execute_poll(
    command: PollStart | PollHelp, *, poll_enabled: bool, poll_seconds: float
) -> CommandResult:
    """Start a poll (the reply is the poll message) when polls are enabled."""
    if isinstance(command, PollHelp):
        return CommandResult(polls.POLL_HELP)
    if not poll_enabled:
        return _error(_POLLS_OFF)
    return CommandResult(
        polls.format_poll(command.question, command.options, poll_seconds),
        (StartPoll(command.question, command.options),),
    )


def forget_targets(command: Forget, requester_id: Snowflake | None) -> tuple[Snowflake, ...]:
    """Whom a `forget` names: its users, and the requester for `me`."""
    me = (requester_id,) if command.me and requester_id is not None else ()
    return _dedupe([*me, *command.user_ids])


def forgets_only_requester(command: object, requester_id: Snowflake | None) -> bool:
    """True for a `forget` of the requester alone (`forget me`): open to anyone, the
    untrusted included, since only their own stored words go."""
    if not isinstance(command, Forget) or requester_id is None:
        return False
    return forget_targets(command, requester_id) == (requester_id,)


def execute_forget(command: Forget, requester_id: Snowflake | None) -> CommandResult:
    """Forget everyone `command` names; the reply is `forgotten_reply` once it is done."""
    targets = forget_targets(command, requester_id)
    if not targets:
        return _error("I can't tell who `me` is here.")
    return CommandResult(
        f"Forgetting what {_users(targets)} said.", tuple(ForgetUser(uid) for uid in targets)
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def forgotten_reply(done: Sequence[Forgotten], requester_id: Snowflake | None) -> str:
    """The reply once `forget` ran: how many messages and observations went, per person."""
    sentences = []
    for f in done:
        what = f"{_count(f.messages, 'message')} and {_count(f.observations, 'observation')}"
        if f.user_id == requester_id:
            sentences.append(f"Forgot what you said: {what} deleted.")
        else:
            sentences.append(f"Forgot what <@{f.user_id}> said: {what} deleted.")
    return " ".join(sentences)


@attrs.frozen
class CommandState:
    """Everything a command may read; built by the channel actor from settings and store.

    `config_values` maps each runtime key to its current value as text; `parse_config_value`
    and `format_config_value` are `config.parse_runtime_value` and `config.format_value`.
    """

    owner_id: Snowflake | None
    trust: Mapping[int, str]
    wakeword: str
    attention_mode: str
    prompt_path: str
    poll_enabled: bool
    poll_seconds: float
    config_values: Mapping[str, str]
    parse_config_value: Callable[[str, str], object]
    format_config_value: Callable[[object], str]
    requester_id: Snowflake | None = None  # who asked; None is never the owner
    # Users' own attention modes in this chat (SPEC 18), and why [access] silences it.
    user_modes: Mapping[int, str] = attrs.field(factory=dict)
    access_note: str | None = None
    # The chat's own prompt, discriminator model and threshold.
    chat: cs.ChatSettings = attrs.field(factory=cs.ChatSettings)

    @property
    def by_owner(self) -> bool:
        """True when the owner asked (the owner-only powers of SPEC 6 apply)."""
        return self.owner_id is not None and self.requester_id == self.owner_id


def owner_only_config(key: str) -> bool:
    """True for config keys only the owner may set (`budget.*`, `models.*`, ...)."""
    return key.strip().lower().startswith(OWNER_CONFIG_PREFIXES)


def needs_owner(command: Command, trust: Mapping[int, str]) -> str | None:
    """Why `command` needs the owner (one sentence), or None when an admin may run it.

    Granting `admin`, changing an admin's tier, removing an admin and setting the money,
    model and reply-policy keys are the owner's alone.
    """
    if isinstance(command, WhitelistAdd | WhitelistRemove):
        if isinstance(command, WhitelistAdd) and command.tier == Tier.ADMIN:
            return _OWNER_ONLY_ADMIN
        if any(Tier.parse(trust.get(uid)) == Tier.ADMIN for uid in command.user_ids):
            return _OWNER_ONLY_ADMIN
    if isinstance(command, ConfigSet) and owner_only_config(command.key):
        return f"Only the owner can change `{_echo(command.key)}`."
    if isinstance(command, Forget) and any(
        Tier.parse(trust.get(uid)) == Tier.ADMIN for uid in command.user_ids
    ):
        return "Only the owner can make me forget an admin."
    return None


def denied_text(command: Command) -> str:
    """The reply when the requester's tier is too low for `command`."""
    need = required_tier(command_name(command))
    article = "an" if need.label[0] in "aeiou" else "a"
    return f"`{command_name(command)}` needs {article} {need.label} or higher."


def execute(command: Command, tier: Tier | None, state: CommandState) -> CommandResult:
    """Check the requester's tier, then run `command` against `state`; never raises.

    `tier` is None for someone untrusted, who may only run `forget me`.
    """
    if isinstance(command, Forget) and forgets_only_requester(command, state.requester_id):
        return execute_forget(command, state.requester_id)
    if isinstance(command, Invalid) and command.command == Forget.NAME and tier is not None:
        return _error(command.error)  # its usage shows `forget me`, which every tier may run
    if not may_run(command_name(command), tier):
        return CommandResult(denied_text(command), (), "denied")
    if (
        isinstance(command, Forget)
        and not state.by_owner
        and state.owner_id in forget_targets(command, state.requester_id)
    ):
        return CommandResult("Only the owner can make me forget the owner.", (), "denied")
    if not state.by_owner:
        why = needs_owner(command, state.trust)
        if why is not None:
            return CommandResult(why, (), "denied")
    wakeword = state.wakeword
    if isinstance(command, WhitelistList | WhitelistAdd | WhitelistRemove | WhitelistHelp):
        return execute_whitelist(
            command, trust=state.trust, owner_id=state.owner_id, wakeword=wakeword
        )
    if isinstance(command, AttentionSet | AttentionShow):
        return execute_attention(
            command,
            current_mode=state.attention_mode,
            prompt_path=state.prompt_path,
            user_modes=state.user_modes,
            access_note=state.access_note,
            chat_note=cs.describe(state.chat),
        )
    if isinstance(command, AttentionUser):
        return execute_attention_user(command, user_modes=state.user_modes)
    if isinstance(command, AccessShow | AccessEdit):
        return execute_access(
            command, values=state.config_values, format_value=state.format_config_value
        )
    if isinstance(command, cs.ChatSettingSet):
        reply, change = cs.execute(command, state.chat)
        return CommandResult(reply, (change,) if change is not None else ())
    if isinstance(command, ConfigGet | ConfigSet):
        return execute_config(
            command,
            values=state.config_values,
            parse_value=state.parse_config_value,
            format_value=state.format_config_value,
        )
    if isinstance(command, PollStart | PollHelp):
        return execute_poll(
            command, poll_enabled=state.poll_enabled, poll_seconds=state.poll_seconds
        )
    if isinstance(command, Forget):
        return execute_forget(command, state.requester_id)
    if isinstance(command, Speak):
        return CommandResult("I can't speak: voice is not available here.")
    if isinstance(command, Stay):
        return CommandResult("I can't stay in a voice channel: voice is not available here.")
    if isinstance(command, Help):
        return CommandResult(help_text(wakeword, command.topic))
    if isinstance(command, Unknown):
        return _error(f"I don't know `{_echo(command.word)}`. {help_text(wakeword)}")
    if command.command == "poll" and not state.poll_enabled:
        return _error(_POLLS_OFF)
    return _error(command.error)
