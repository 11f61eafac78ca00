"""What the panel reads and changes, over the running bot's own actors and store.

Every change goes through the chat command executor (`picortex.core.commands.execute`) with
the owner's tier, applies the same changes a chat command would and writes the same `command`
event, marked `source: "web"`. Nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio

from picortex import config as config_mod
from picortex.actors import agent_voice
from picortex.actors.command_changes import Applied, apply_changes
from picortex.actors.pipeline import ChannelRegistry, SettingsSource
from picortex.cli.errors import current_pauses, pause_record
from picortex.core import chat_settings as cs
from picortex.core import commands as cmds
from picortex.core.attention import mode_for_chat
from picortex.core.discriminate import interpret as interpret_result
from picortex.core.discriminate import trial_request
from picortex.core.llm import LLMRequest, LLMResult
from picortex.core.personas import AGENTS_FILE, PersonaSet
from picortex.core.triggerlog import TriggerEntry
from picortex.core.trust import Tier, is_trusted
from picortex.errors import ConfigError, PanelInputError, StoreError
from picortex.store import RESOLUTIONS, AdminQueries, InvocationError
from picortex.store.chathome import (
    AGENT_PROMPT_RELPATH,
    PROMPT_RELPATH,
    ChatHome,
    ChatHomeError,
)
from picortex.store.personas import load_personas
from picortex.types import ChannelType, EventSink, Message, Snowflake
from picortex.web.logtail import LogFilter, TailResult, tail
from picortex.web.settings import Group, changed_values, file_keys, settings_view

logger = logging.getLogger(__name__)

SOURCE: Final = "web"
# Discord's own limit for one message's content.
MESSAGE_MAX_CHARS: Final = 2000
# "test discriminator" classifies at most this many messages per run (each is a model call).
TEST_MAX_MESSAGES: Final = 20
# The overview's chart covers this many days, today included.
SPEND_DAYS: Final = 14
# How much of a prompt the editor accepts: the discriminator caps what it sends anyway.
PROMPT_MAX_CHARS: Final = 20_000
# Prompt versions shown with their diffs (older ones stay in the chat home's git log).
HISTORY_SHOWN: Final = 20
_SNOWFLAKE: Final = re.compile(r"[0-9]{1,20}")
_MENTION: Final = re.compile(r"<@!?([0-9]{1,20})>")
# Log fields that hold a Discord id without saying so in their name.
ID_FIELDS: Final = frozenset({"target", "requester"})

KINDS: Final[Mapping[int, str]] = {
    ChannelType.GUILD_TEXT: "text",
    ChannelType.GUILD_ANNOUNCEMENT: "text",
    ChannelType.DM: "dm",
    ChannelType.GROUP_DM: "dm",
    ChannelType.GUILD_VOICE: "voice",
    ChannelType.ANNOUNCEMENT_THREAD: "thread",
    ChannelType.PUBLIC_THREAD: "thread",
    ChannelType.PRIVATE_THREAD: "thread",
    ChannelType.GUILD_FORUM: "forum",
    13: "voice",  # GUILD_STAGE_VOICE
    16: "forum",  # GUILD_MEDIA: a forum of media posts
}


class Cache(Protocol):
    """The context cache's read side."""

    def recent(self, channel_id: Snowflake, n: int) -> list[Message]: ...


class Model(Protocol):
    """The LLM actor's client side."""

    async def complete(self, request: LLMRequest) -> LLMResult: ...


class Poster(Protocol):
    """The REST call the send page makes."""

    async def create_message(
        self,
        channel_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        allowed_mentions: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...


@attrs.frozen
class Chat:
    """One channel, thread or DM as the panel lists it."""

    chat_id: str
    name: str
    guild_id: str | None
    kind: str
    attention_mode: str
    own_mode: bool  # False: the chat follows a default (or its parent channel)

    def as_json(self) -> dict[str, object]:
        """The API's chat object."""
        return {
            "chat_id": self.chat_id,
            "name": self.name,
            "guild_id": self.guild_id,
            "kind": self.kind,
            "attention_mode": self.attention_mode,
        }


@attrs.frozen
class ChangeResult:
    """What a change did: `ok`, and one readable sentence (or a few) for the page."""

    ok: bool
    message: str


@attrs.frozen
class Version:
    """One prompt version with the change it made."""

    commit: str
    date: str
    message: str
    diff: str


@attrs.frozen
class TestLine:
    """One message of a discriminator test run and what the discriminator decided."""

    author: str
    content: str
    outcome: str
    reason: str
    cost_usd: float


@attrs.frozen
class PersonaReport:
    """`agents.yaml` as the bot loaded it, and what is wrong with the file on disk now."""

    path: str
    loaded: PersonaSet
    error: str | None
    text: str | None


def parse_snowflake(value: object, what: str) -> int:
    """A Discord id given as text (or a number); PanelInputError otherwise."""
    text = (
        str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    )
    if not _SNOWFLAKE.fullmatch(text) or not 0 < int(text) <= config_mod.SNOWFLAKE_MAX:
        raise PanelInputError(f"{what} must be a Discord id (digits).")
    return int(text)


def with_names(text: str, names: Mapping[int, str]) -> str:
    """Discord mentions (`<@id>`) written as @name (or @id when the name is unknown)."""

    def name(match: re.Match[str]) -> str:
        uid = int(match.group(1))
        return "@" + names.get(uid, str(uid))

    return _MENTION.sub(name, text)


def plain(text: str, names: Mapping[int, str] | None = None) -> str:
    """A command reply as page text: mentions as @names, no Markdown code marks."""
    return with_names(text, names or {}).replace("`", "")


def _is_id_key(key: str) -> bool:
    return key == "id" or key.endswith("_id") or key in ID_FIELDS


def string_ids(record: Mapping[str, Any]) -> dict[str, Any]:
    """A log record with its Discord ids as strings (they may have been written as numbers)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, int) and not isinstance(value, bool) and _is_id_key(key):
            out[key] = str(value)
        elif key.endswith("_ids") and isinstance(value, list):
            out[key] = [
                str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value
            ]
        else:
            out[key] = value
    return out


class Panel:
    """The panel's view of one running bot."""

    def __init__(
        self,
        *,
        settings: SettingsSource,
        store: AdminQueries,
        events: EventSink,
        home: Path,
        action_log_path: Path,
        snapshot: Callable[[], dict[str, Any]],
        registry: ChannelRegistry,
        cache: Cache,
        llm: Model | None,
        rest: Poster,
        personas: Callable[[], PersonaSet],
        triggers: Callable[[], Sequence[TriggerEntry]],
        dm_channels: Mapping[Snowflake, Snowflake],
        bot_user: Callable[[], tuple[Snowflake | None, str]] = lambda: (None, "picortex"),
        clock: Callable[[], float] = time.time,
        forget_triggers: Callable[[Snowflake], None] = lambda user_id: None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.events = events
        self.home = home
        self.action_log_path = action_log_path
        self.snapshot = snapshot
        self.registry = registry
        self.cache = cache
        self.llm = llm
        self.rest = rest
        self._personas = personas
        self._triggers = triggers
        self._dm_channels = dm_channels
        self._bot_user = bot_user
        self.clock = clock
        self._forget_triggers = forget_triggers

    # ----- reading ---------------------------------------------------------------------

    def owner_id(self) -> int | None:
        """The owner, as whom the panel acts."""
        return self.settings().owner_id

    def _mode(self, chat_id: int, is_dm: bool) -> tuple[str, bool]:
        settings = self.settings()
        own = self.store.get_chat_config(chat_id)
        parent_id = self.registry.parent_of(chat_id)
        parent = self.store.get_chat_config(parent_id) if parent_id is not None else None
        mode = mode_for_chat(
            own.attention_mode if own is not None else None,
            parent.attention_mode if parent is not None else None,
            is_dm,
            settings.attention,
        )
        return mode, own is not None

    def chats(self) -> list[Chat]:
        """Every channel, thread and DM the bot knows, guild channels first by name."""
        configs = {c.chat_id: c.attention_mode for c in self.store.chat_configs()}
        settings = self.settings()
        dm_names: dict[int, str] = {}
        for entry in self._triggers():
            if entry.guild_id is None:
                dm_names.setdefault(entry.channel_id, f"DM with {entry.author_name}")
        for user_id, channel_id in self._dm_channels.items():
            dm_names.setdefault(channel_id, f"DM with user {user_id}")
        found: dict[int, Chat] = {}
        for channel in self.registry.channels.values():
            if channel.type == ChannelType.GUILD_CATEGORY:
                continue
            kind = KINDS.get(channel.type, "text")
            own = configs.get(channel.id)
            parent = (
                configs.get(channel.parent_id) if channel.is_thread and channel.parent_id else None
            )
            mode = mode_for_chat(own, parent, kind == "dm", settings.attention)
            found[channel.id] = Chat(
                str(channel.id),
                channel.name or dm_names.get(channel.id) or str(channel.id),
                None if channel.guild_id is None else str(channel.guild_id),
                kind,
                mode,
                own is not None,
            )
        for chat_id in {*configs, *dm_names} - found.keys():
            # Not in a guild the gateway announced: a DM (guild channels arrive at connect).
            own = configs.get(chat_id)
            found[chat_id] = Chat(
                str(chat_id),
                dm_names.get(chat_id, "direct message"),
                None,
                "dm",
                mode_for_chat(own, None, True, settings.attention),
                own is not None,
            )
        return sorted(found.values(), key=lambda c: (c.guild_id is None, c.name, int(c.chat_id)))

    def chat(self, chat_id: int) -> Chat:
        """One chat; a chat the bot has not seen yet is shown as an unknown DM-or-channel."""
        channel = self.registry.get(chat_id)
        if channel is not None:
            kind = KINDS.get(channel.type, "text")
            mode, own = self._mode(chat_id, kind == "dm")
            return Chat(
                str(chat_id),
                channel.name or str(chat_id),
                None if channel.guild_id is None else str(channel.guild_id),
                kind,
                mode,
                own,
            )
        for chat in self.chats():
            if chat.chat_id == str(chat_id):
                return chat
        raise PanelInputError(f"The bot has not seen a chat with id {chat_id}.")

    def trust(self) -> list[tuple[str, str]]:
        """(user id, tier) for the owner and everyone on the trust list, highest tier first."""
        owner = self.owner_id()
        rows = [(str(owner), "owner")] if owner is not None else []
        listed = [(uid, tier) for uid, tier in self.store.trust_list() if uid != owner]
        listed.sort(key=lambda row: (-int(Tier.parse(row[1]) or 0), row[0]))
        return rows + [(str(uid), tier) for uid, tier in listed]

    def errors(self, unresolved: bool) -> list[InvocationError]:
        """Invocation errors, newest first."""
        rows = self.store.invocation_errors(unresolved_only=unresolved)
        return sorted(rows, key=lambda e: (-e.created_at, -e.id))

    def paused(self) -> list[dict[str, object]]:
        """What composting pauses now (personas and stages), until when and why."""
        settings = self.settings().composting
        found = current_pauses(self.store, settings, self.clock())
        return [pause_record(p, settings.threshold) for p in found]

    def log(self, n: int, where: LogFilter) -> TailResult:
        """The newest `n` matching action-log events, oldest first."""
        return tail(self.action_log_path, n, where)

    def message_texts(self, records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
        """message id -> (author, text) for the messages the records are about, when cached."""
        wanted: dict[int, set[int]] = {}
        for record in records:
            channel = str(record.get("channel_id") or "")
            message = str(record.get("message_id") or "")
            if channel.isdigit() and message.isdigit():
                wanted.setdefault(int(channel), set()).add(int(message))
        texts: dict[str, tuple[str, str]] = {}
        names = self.names()
        for entry in self._triggers():
            texts[str(entry.id)] = (entry.author_name, with_names(entry.content, names))
        per_channel = self.settings().cache_messages_per_channel
        for channel_id, ids in wanted.items():
            if all(str(i) in texts for i in ids):
                continue
            for cached in self.cache.recent(channel_id, per_channel):
                if cached.id in ids:
                    texts[str(cached.id)] = (
                        cached.author.display_name,
                        with_names(cached.content, names),
                    )
        return texts

    async def settle(self) -> None:
        """Wait for the writes the bot queued so far, so a page shows what it already did.

        The spend chart, the error list and the trust list are read from the database, and
        the store actor commits in groups a few tens of milliseconds behind the bot.
        """
        try:
            await self.store.flush()
        except StoreError as exc:
            logger.warning("the panel reads what is committed: %s", exc)

    def spend(self, days: int = SPEND_DAYS) -> dict[str, list[tuple[str, float]]]:
        """workspace -> [(day, USD)] for the last `days` UTC days, oldest first, zeros included."""
        today = datetime.fromtimestamp(self.clock(), UTC).date()
        first = today - timedelta(days=days - 1)
        since = datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp()
        labels = [(first + timedelta(days=i)).isoformat() for i in range(days)]
        totals: dict[str, dict[str, float]] = {}
        for workspace, day, usd in self.store.daily_spend(since):
            totals.setdefault(workspace, {})[day] = usd
        return {
            ws: [(day, per_day.get(day, 0.0)) for day in labels]
            for ws, per_day in sorted(totals.items())
        }

    def names(self) -> dict[int, str]:
        """User id -> display name: the bot, and the authors of the triggers it remembers."""
        names = {entry.author_id: entry.author_name for entry in self._triggers()}
        bot_id, bot_name = self._bot_user()
        if bot_id is not None:
            names[bot_id] = bot_name
        return names

    def personas(self) -> PersonaReport:
        """The personas in use, and the file on disk checked again (its errors, if any)."""
        path = self.home / AGENTS_FILE
        try:
            text: str | None = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = None
        except (OSError, UnicodeDecodeError) as exc:
            text = None
            return PersonaReport(str(path), self._personas(), f"{path}: {exc}", None)
        error = None
        try:
            load_personas(self.home)
        except ConfigError as exc:
            error = str(exc)
        return PersonaReport(str(path), self._personas(), error, text)

    # ----- prompts ---------------------------------------------------------------------

    def _home(self, chat_id: int) -> ChatHome:
        return ChatHome(self.home, str(chat_id))

    async def prompt(self, chat_id: int) -> str:
        """The chat's discriminator prompt (its chat home is made on first use)."""
        home = self._home(chat_id)

        def read() -> str:
            if home.exists():
                try:
                    return home.prompt_path.read_text(encoding="utf-8")
                except FileNotFoundError:
                    pass  # deleted by hand: read_prompt restores the default
            return home.read_prompt()

        try:
            return await trio.to_thread.run_sync(read)
        except (ChatHomeError, OSError, UnicodeDecodeError) as exc:
            raise PanelInputError(str(exc)) from None

    async def history(self, chat_id: int, relpath: str = PROMPT_RELPATH) -> list[Version]:
        """A prompt's newest versions (the discriminator's unless `relpath` names another),
        newest first, each with its diff."""
        home = self._home(chat_id)
        try:
            found = await trio.to_thread.run_sync(home.history_with_diffs, HISTORY_SHOWN, relpath)
        except ChatHomeError as exc:
            raise PanelInputError(str(exc)) from None
        return [Version(v.commit, v.date, v.message, _hunks(diff)) for v, diff in found]

    async def save_prompt(self, chat_id: int, text: str) -> ChangeResult:
        """Replace the prompt: one commit in the chat home, one `command` event."""
        text = text.replace("\r\n", "\n")
        if not text.strip():
            raise PanelInputError("The prompt is empty; write one or keep the current version.")
        if len(text) > PROMPT_MAX_CHARS:
            raise PanelInputError(f"The prompt is longer than {PROMPT_MAX_CHARS} characters.")
        if not text.endswith("\n"):
            text += "\n"
        home = self._home(chat_id)
        try:
            changed = await trio.to_thread.run_sync(
                home.write_prompt, text, "Prompt edited in the web panel"
            )
        except ChatHomeError as exc:
            raise PanelInputError(str(exc)) from None
        self._command_event(
            "prompt", f"prompt save {chat_id}", "ok" if changed else "error", chat_id
        )
        if not changed:
            return ChangeResult(False, "The prompt is unchanged: nothing to save.")
        return ChangeResult(True, "Saved the discriminator prompt as a new version.")

    # ----- the chat's own agent prompt, discriminator model and threshold ---------------

    async def chat_settings(self, chat_id: int) -> cs.ChatSettings:
        """The chat's own agent prompt, discriminator model and threshold."""
        return await agent_voice.chat_settings(
            self.home, self.store, chat_id, self.settings().discriminator.model
        )

    async def agent_history(self, chat_id: int) -> list[Version]:
        """The chat's agent prompt versions, newest first, each with its diff."""
        return await self.history(chat_id, AGENT_PROMPT_RELPATH)

    async def set_chat_setting(self, chat_id: int, field: str, text: object) -> ChangeResult:
        """`attention prompt|model|threshold TEXT` in a chat: a commit in its chat home for
        the prompt (an empty prompt resets it), `chat_config` for the others."""
        if field not in cs.FIELDS:
            raise PanelInputError(f"The setting must be one of {', '.join(cs.FIELDS)}.")
        if not isinstance(text, str | int | float) or isinstance(text, bool):
            raise PanelInputError(f"The {field} must be text.")
        value = str(text)
        if field == "prompt" and not value.strip():
            value = cs.RESET_WORD
        parsed = cs.parse(cs.FIELDS[cs.FIELDS.index(field)], value)
        if isinstance(parsed, str):
            raise PanelInputError(parsed)
        self.chat(chat_id)  # an unknown chat is refused before anything changes
        return await self.run_command(parsed, chat_id)

    async def test_discriminator(self, chat_id: int, n: int) -> list[TestLine]:
        """Classify the chat's last `n` cached messages from people, as the bot would."""
        if not 1 <= n <= TEST_MAX_MESSAGES:
            raise PanelInputError(f"N must be between 1 and {TEST_MAX_MESSAGES}.")
        settings = self.settings()
        messages = self.cache.recent(chat_id, settings.cache_messages_per_channel)
        picks = [i for i, m in enumerate(messages) if not m.author.bot][-n:]
        if not picks:
            raise PanelInputError("No cached messages from people in this chat yet.")
        template = await self.prompt(chat_id)
        own = self.store.get_chat_config(chat_id)
        classifier = settings.classifier(own.discriminator_model if own else None)
        lines: list[TestLine] = []
        chat = self.chat(chat_id)
        bot_id, _ = self._bot_user()

        def trusted(user_id: int) -> bool:
            return is_trusted(user_id, settings.owner_id, self.store.get_tier, bot_user_id=bot_id)

        for index in picks:
            message = messages[index]
            is_dm = message.guild_id is None
            request = trial_request(
                classifier,
                template,
                messages,
                index,
                chat_id=chat_id,
                chat_name=chat.name,
                trusted=trusted,
            )
            if not isinstance(request, LLMRequest):
                decision = request
                lines.append(
                    TestLine(
                        message.author.display_name,
                        message.content,
                        decision.outcome,
                        decision.reason,
                        0.0,
                    )
                )
                continue
            if self.llm is None:
                raise PanelInputError("The model actor is not running.")
            result = await self.llm.complete(request)
            decision = interpret_result(
                result,
                is_dm=is_dm,
                timeout_seconds=settings.discriminator.timeout_seconds,
                threshold=own.discriminator_threshold if own is not None else None,
            )
            lines.append(
                TestLine(
                    message.author.display_name,
                    message.content,
                    "respond" if decision.outcome == "respond" else "skip",
                    decision.reason,
                    result.cost_usd,
                )
            )
        return lines

    # ----- changes through the command executor -------------------------------------------

    def _state(self, chat_id: int | None) -> cmds.CommandState:
        settings = self.settings()
        mode = settings.attention.group
        prompt_path = ""
        if chat_id is not None:
            mode = self.chat(chat_id).attention_mode
            prompt_path = str(self._home(chat_id).prompt_path)
        user_modes = self.user_modes(chat_id) if chat_id is not None else {}
        return cmds.CommandState(
            owner_id=settings.owner_id,
            trust=dict(self.store.trust_list()),
            wakeword=settings.wakeword,
            attention_mode=mode,
            prompt_path=prompt_path,
            poll_enabled=settings.poll_enabled,
            poll_seconds=settings.poll_seconds,
            config_values=config_mod.runtime_values(settings),
            parse_config_value=config_mod.parse_runtime_value,
            format_config_value=config_mod.format_value,
            requester_id=settings.owner_id,  # the panel acts as the owner (SPEC 13)
            user_modes=user_modes,
        )

    def _command_event(
        self,
        name: str,
        text: str,
        result: str,
        chat_id: int | None = None,
        **extra: object,
    ) -> None:
        owner = self.owner_id()
        self.events.emit(
            "command",
            channel_id=None if chat_id is None else str(chat_id),
            requester=None if owner is None else str(owner),
            tier=Tier.ADMIN.label,
            command=name,
            text=text[:200],
            result=result,
            source=SOURCE,
            **extra,
        )

    async def _run(
        self, command: cmds.Command, chat_id: int | None = None
    ) -> tuple[ChangeResult, Applied]:
        state = self._state(chat_id)
        if chat_id is not None:
            state = attrs.evolve(state, chat=await self.chat_settings(chat_id))
        result = cmds.execute(command, Tier.ADMIN, state)
        applied = await apply_changes(
            result.changes,
            store=self.store,
            settings=self.settings,
            home=self.home,
            chat_id=chat_id,
            now=self.clock(),
        )
        for done in applied.forgotten:
            self._forget_triggers(done.user_id)
        extra = {
            "forgotten": [
                {"user_id": str(f.user_id), "messages": f.messages, "observations": f.observations}
                for f in applied.forgotten
            ]
        }
        self._command_event(
            cmds.command_name(command),
            cmds.render_command(command),
            result.outcome,
            chat_id,
            **(extra if applied.forgotten else {}),
        )
        reply = applied.reply(result, state.requester_id)
        return ChangeResult(result.ok, plain(reply, self.names())), applied

    async def run_command(self, command: cmds.Command, chat_id: int | None = None) -> ChangeResult:
        """Execute a chat command as the owner and apply its changes, as the chat does."""
        outcome, _ = await self._run(command, chat_id)
        return outcome

    async def set_attention(self, chat_id: int, mode: object) -> ChangeResult:
        """`attention MODE` in a chat."""
        if not isinstance(mode, str) or mode not in cmds.ATTENTION_MODES:
            raise PanelInputError(f"mode must be one of {', '.join(cmds.ATTENTION_MODES)}.")
        self.chat(chat_id)  # an unknown chat is refused before anything changes
        return await self.run_command(cmds.AttentionSet(mode), chat_id)

    def user_modes(self, chat_id: int) -> dict[int, str]:
        """Users' own attention modes in the chat (SPEC 18): user id -> mode."""
        return {r.user_id: r.mode for r in self.store.user_attentions() if r.chat_id == chat_id}

    def user_modes_json(self, chat_id: int) -> list[dict[str, str]]:
        """Users' own modes in the chat, each with the user's name where it is known."""
        names = self.names()
        return [
            {"user_id": str(uid), "name": names.get(uid, str(uid)), "mode": mode}
            for uid, mode in sorted(self.user_modes(chat_id).items())
        ]

    async def set_user_attention(self, chat_id: int, user_id: object, mode: object) -> ChangeResult:
        """`attention user <@user> MODE|default` in a chat."""
        uid = parse_snowflake(user_id, "user_id")
        choices = (*cmds.ATTENTION_MODES, cmds.USER_MODE_DEFAULT)
        if not isinstance(mode, str) or mode not in choices:
            raise PanelInputError(f"mode must be one of {', '.join(choices)}.")
        self.chat(chat_id)  # an unknown chat is refused before anything changes
        command = cmds.AttentionUser((uid,), None if mode == cmds.USER_MODE_DEFAULT else mode)
        return await self.run_command(command, chat_id)

    def access(self) -> dict[str, list[str]]:
        """The `[access]` lists in force (SPEC 18), ids as strings."""
        access = self.settings().access
        return {
            name: [str(i) for i in getattr(access, name)]
            for name in ("allow_roles", "allow_channels", "deny_channels")
        }

    async def set_access(self, lists: Mapping[str, object]) -> ChangeResult:
        """Replace the `[access]` lists named in `lists` (each a list of ids), as `config set
        access.NAME ...` does: all of them or none."""
        submitted: dict[str, str] = {}
        for name, value in lists.items():
            if name not in ("allow_roles", "allow_channels", "deny_channels"):
                continue
            if not isinstance(value, list):
                raise PanelInputError(f"{name} must be a list of Discord ids.")
            ids = [str(parse_snowflake(v, name)) for v in value]
            submitted[f"access.{name}"] = ", ".join(ids) or "none"
        if not submitted:
            raise PanelInputError(
                "Give at least one of allow_roles, allow_channels, deny_channels."
            )
        return await self.save_settings(submitted)

    async def add_trust(self, user_id: object, tier: object) -> ChangeResult:
        """`whitelist add <@user> TIER`."""
        uid = parse_snowflake(user_id, "user_id")
        parsed = Tier.parse(tier if isinstance(tier, str) else None)
        if parsed is None:
            raise PanelInputError("tier must be user, trusted or admin.")
        return await self.run_command(cmds.WhitelistAdd((uid,), parsed))

    async def remove_trust(self, user_id: object) -> ChangeResult:
        """`whitelist remove <@user>`."""
        uid = parse_snowflake(user_id, "user_id")
        return await self.run_command(cmds.WhitelistRemove((uid,)))

    async def forget(self, user_id: object) -> tuple[ChangeResult, cmds.Forgotten | None]:
        """`forget <@user>`: what they said leaves memory; with what it deleted."""
        uid = parse_snowflake(user_id, "user_id")
        outcome, applied = await self._run(cmds.Forget((uid,)))
        return outcome, next(iter(applied.forgotten), None)

    def settings_groups(self) -> list[Group]:
        """Every key `config set` takes, grouped, with its value, bounds and source."""
        settings = self.settings()
        return settings_view(
            config_mod.runtime_values(settings),
            self.store.runtime_config(),
            file_keys(settings.config_path),
        )

    async def save_settings(self, submitted: Mapping[str, str]) -> ChangeResult:
        """`config set KEY VALUE` for every key whose value changed: all of them or none.

        Each change is the executor's, checked and logged as a chat command; when one is
        refused, that one is run (so its refusal is logged, as in chat) and nothing is saved.
        """
        state = self._state(None)
        commands = [
            cmds.ConfigSet(key, value)
            for key, value in changed_values(submitted, state.config_values).items()
        ]
        if not commands:
            return ChangeResult(True, "Nothing to save: every setting already has that value.")
        for command in commands:
            if not cmds.execute(command, Tier.ADMIN, state).ok:
                refused = await self.run_command(command)
                return ChangeResult(False, f"{refused.message.rstrip('.')}; nothing was saved.")
        saved = [await self.run_command(command) for command in commands]
        return ChangeResult(all(s.ok for s in saved), " ".join(s.message for s in saved))

    def resolve_error(self, error_id: object, resolution: object) -> ChangeResult:
        """`picortex errors resolve ID --as RESOLUTION`, logged as a web command."""
        text = str(error_id).strip() if isinstance(error_id, str | int) else ""
        if not text.isdigit():
            raise PanelInputError("The error id must be a number.")
        if not isinstance(resolution, str) or resolution not in RESOLUTIONS:
            raise PanelInputError(f"as must be one of {', '.join(RESOLUTIONS)}.")
        done = self.store.resolve_invocation_error(int(text), resolution, self.clock())
        command = f"errors resolve {text} --as {resolution}"
        self._command_event("errors", command, "ok" if done else "error")
        if not done:
            raise PanelInputError(f"No invocation error has id {text}.")
        return ChangeResult(True, f"Invocation error {text} resolved as {resolution}.")

    async def send(self, channel_id: object, content: object) -> dict[str, Any]:
        """Post a manual message (no pings); a `manual` event records it."""
        cid = parse_snowflake(channel_id, "channel_id")
        if not isinstance(content, str) or not content.strip():
            raise PanelInputError("content must be some text.")
        if len(content) > MESSAGE_MAX_CHARS:
            raise PanelInputError(f"content must be at most {MESSAGE_MAX_CHARS} characters.")
        try:
            posted = await self.rest.create_message(cid, content, allowed_mentions={"parse": []})
        except Exception as exc:
            self.events.emit(
                "manual",
                channel_id=str(cid),
                content_length=len(content),
                result="error",
                error=str(exc)[:200],
                source=SOURCE,
            )
            raise PanelInputError(f"Discord did not take the message: {str(exc)[:200]}") from None
        message_id = str(posted.get("id", ""))
        self.events.emit(
            "manual",
            channel_id=str(cid),
            message_id=message_id,
            content_length=len(content),
            result="ok",
            source=SOURCE,
        )
        return {"channel_id": str(cid), "message_id": message_id, "content": content}


def _hunks(patch: str) -> str:
    """A patch without its git headers (diff, index, mode, file names): hunks only."""
    lines = patch.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    return "\n".join(lines[start:])
