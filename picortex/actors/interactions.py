"""Slash-command I/O (SPEC 15): registering `/picortex` on READY, and what answering an
interaction is made of (its message bodies, the streamed `ask` surface, its `reply` events).

The initial response and the answers are sent by the interaction's `AnswerSink`
(picortex.actors.interaction_sink). Interaction tokens travel only in request paths and are
never written to a log line or an event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import trio

from picortex.actors.clients import (
    CommandTreeStore,
    CurrentSettings,
    FatalReporter,
    InteractionRest,
    ReplyTarget,
    Spawner,
    TrustReader,
)
from picortex.actors.failures import error_line
from picortex.core import policy
from picortex.core import slash as sl
from picortex.core.access import role_tier
from picortex.core.trust import is_trusted
from picortex.errors import FatalDiscordError
from picortex.types import EventSink, Interaction, Message, Snowflake

logger = logging.getLogger(__name__)

# An initial response must reach Discord within 3 s of the interaction; one that cannot is
# given up a little before, since a later one is refused anyway.
RESPONSE_DEADLINE_SECONDS: Final = 2.8
# Edits and follow-ups ride on the 15-minute token; an answer's post gets this long.
FOLLOW_UP_TIMEOUT_SECONDS: Final = 60.0
# A command still waiting in its channel's mailbox this long after it arrived (the channel is
# busy, say with a discriminator call) is deferred, so Discord's 3 s are never missed; the
# answer then edits the deferred response.
DEFER_AFTER_SECONDS: Final = 1.5
GLOBAL_SCOPE: Final = "global"
REFUSAL: Final = "You are not on this bot's trust list, so it cannot do that for you."


class InteractionStore(TrustReader, CommandTreeStore, Protocol):
    """What slash commands read and keep (the registered command tree's digest)."""


class InteractionAnswers(FatalReporter, Protocol):
    """What answering one interaction uses (its sink): Discord's routes and the log."""

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

    @property
    def rest(self) -> InteractionRest:
        """Discord's interaction routes."""
        ...


class InteractionClients(InteractionAnswers, Spawner, Protocol):
    """What slash commands use besides answering: the settings, trust, registration."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force."""
        ...

    @property
    def store(self) -> InteractionStore:
        """The trust list and the command tree's digest."""
        ...

    @property
    def replies(self) -> ReplyTarget:
        """Where replies go under the response policy."""
        ...


def as_message(interaction: Interaction, text: str) -> Message:
    """The interaction as the message a typed command would have been (for one executor)."""
    return Message(
        id=interaction.id,
        channel_id=interaction.channel_id,
        author=interaction.user,
        content=text,
        timestamp="",
        guild_id=interaction.guild_id,
    )


def predicted_ephemeral(clients: InteractionClients, interaction: Interaction) -> bool:
    """Whether the answer will be private, judged before the channel handles it."""
    settings = clients.settings()
    # An allowed role makes a stranger a `user` (SPEC 18), as the channel will judge it.
    trusted = is_trusted(interaction.user.id, settings.owner_id, clients.store.get_tier) or (
        role_tier(interaction.member_roles, settings.access.allow_roles) is not None
    )
    name = next((o.name for o in interaction.options if o.type in sl.SUBCOMMANDS), "help")
    return sl.answer_is_private(
        name,
        trusted=trusted,
        ok=True,
        target=clients.replies.reply_target(name),
    )


def message_body(text: str, *, ephemeral: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "content": text,
        # Answers mention people by name only: nobody is pinged by a slash answer.
        "allowed_mentions": policy.allowed_mentions(ping_users=False),
    }
    if ephemeral:
        body["flags"] = sl.EPHEMERAL
    return body


class AnswerSurface:
    """A streamed `ask` answer (SPEC 15, 16): the deferred response grows by edits, and past
    2000 characters the answer continues in follow-up messages, edited the same way.

    Args:
        before_first: awaited before the first write (the deferral must be sent first).
    """

    target = "interaction"

    def __init__(
        self,
        clients: InteractionAnswers,
        interaction: Interaction,
        before_first: Callable[[], Awaitable[None]],
        *,
        timeout: float = FOLLOW_UP_TIMEOUT_SECONDS,
    ) -> None:
        self._rest = clients.rest
        self._interaction = interaction
        self._before_first = before_first
        self._timeout = timeout
        self.channel_id: Snowflake | None = interaction.channel_id
        self.message_ids: list[Snowflake] = []

    async def post(self, index: int, text: str) -> None:
        """The first part edits the deferred response; later parts are follow-ups."""
        inter = self._interaction
        body = message_body(text, ephemeral=False)
        with trio.fail_after(self._timeout):
            if index == 0:
                await self._before_first()
                data = await self._rest.edit_original_interaction_response(
                    inter.application_id, inter.token, body
                )
            else:
                data = await self._rest.create_followup_message(
                    inter.application_id, inter.token, body
                )
        self.message_ids.append(int(data.get("id", 0) or 0))

    async def edit(self, index: int, text: str) -> None:
        """Change one part of the answer."""
        inter = self._interaction
        body = message_body(text, ephemeral=False)
        with trio.fail_after(self._timeout):
            if index == 0:
                await self._rest.edit_original_interaction_response(
                    inter.application_id, inter.token, body
                )
            else:
                await self._rest.edit_followup_message(
                    inter.application_id, inter.token, self.message_ids[index], body
                )


def note_failure(
    clients: InteractionAnswers, interaction: Interaction, what: str, exc: Exception
) -> None:
    if isinstance(exc, FatalDiscordError):
        clients.fatal(exc)
    message = error_line(exc)
    clients.events.emit(
        "error",
        scope="interaction",
        interaction_id=interaction.id,
        channel_id=interaction.channel_id,
        message=f"{what}: {message}",
    )
    logger.warning("interaction %s: %s failed: %s", interaction.id, what, message)


def reply_event(
    clients: InteractionAnswers,
    interaction: Interaction,
    command: str | None,
    ephemeral: bool,
    result: str,
    chars: int,
    exc: Exception | None,
    *,
    parts: int | None = None,
    ids: list[Snowflake] | None = None,
    refused: bool = False,
) -> None:
    fields: dict[str, object] = {
        "command": command,
        "mode": "interaction",
        "target": interaction.channel_id,
        "trigger_id": interaction.id,
        "result": result,
        "ephemeral": ephemeral,
        "chars": chars,
    }
    if parts is not None:
        fields["parts"] = parts
    if ids:
        fields["message_ids"] = ids
    if refused:
        fields["refused"] = True
    if exc is not None:
        fields["error"] = error_line(exc)
    clients.events.emit("reply", **fields)


# ----- registration on READY -------------------------------------------------------------


async def register_commands(clients: InteractionClients, application_id: Snowflake) -> None:
    """Bulk-overwrite the `/picortex` tree where `[slash]` says, unless already registered.

    With `guild_ids` set, the commands go to those guilds only and global commands are left
    as they are. Failures are logged; the bot runs on without slash commands.
    """
    settings = clients.settings().slash
    if not settings.enabled:
        return
    scopes: list[tuple[str, Snowflake | None]] = (
        [(f"guild:{g}", g) for g in settings.guild_ids]
        if settings.guild_ids
        else [(GLOBAL_SCOPE, None)]
    )
    rest = clients.rest
    for scope, guild_id in scopes:
        tree = sl.command_tree(global_scope=guild_id is None)
        digest = sl.tree_hash(application_id, scope, tree)
        try:
            if await _registered_hash(clients, scope) == digest:
                clients.events.emit("slash", action="unchanged", scope=scope)
                continue
            if guild_id is None:
                await rest.bulk_overwrite_global_commands(application_id, tree)
            else:
                await rest.bulk_overwrite_guild_commands(application_id, guild_id, tree)
            _remember_hash(clients, scope, digest, time.time())
        except Exception as exc:
            if isinstance(exc, FatalDiscordError):
                clients.fatal(exc)
            message = error_line(exc)
            clients.events.emit("slash", action="failed", scope=scope, error=message)
            logger.warning("registering slash commands (%s) failed: %s", scope, message)
            continue
        clients.events.emit("slash", action="registered", scope=scope, commands=len(tree))
        logger.info("registered /%s commands (%s)", sl.COMMAND_NAME, scope)


async def _registered_hash(clients: InteractionClients, scope: str) -> str | None:
    """The digest of the tree last registered in `scope`, read on the store's thread."""
    return await clients.store.app_commands_hash(scope)


def _remember_hash(clients: InteractionClients, scope: str, digest: str, now: float) -> None:
    """Queue remembering that the tree with `digest` is registered in `scope`."""
    clients.store.set_app_commands_hash(scope, digest, now)
