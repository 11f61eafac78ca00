"""Applies what a command changed (trust, config, attention, users' own attention, memory)
to the store.

One place for typed chat commands, slash commands and the web panel, so each front door
makes the same change in the same way and the change is durable before anyone is told.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from picortex.actors.clients import CurrentSettings
from picortex.core import commands as cmds
from picortex.core.chat_settings import ChatSettingChange
from picortex.errors import DatabaseUnreachable
from picortex.store.chathome import AGENT_PROMPT_RESET, AGENT_PROMPT_SET, ChatHome
from picortex.store.queries import AdminQueries, ChatConfigQueries
from picortex.types import Snowflake

logger = logging.getLogger(__name__)

FORGET_FAILED = "My memory could not be reached, so nothing was forgotten; please try again."
PROMPT_FAILED = "This chat's prompt could not be saved; please try again."
NOT_SAVED_YET = (
    "The database cannot be reached right now: the change is in force here and will be saved"
    " once it is back."
)


@attrs.frozen
class Applied:
    """What applying a command's changes produced: the poll it asks to start, and what
    `forget` deleted (the reply counts it)."""

    poll: cmds.StartPoll | None = None
    forgotten: tuple[cmds.Forgotten, ...] = ()
    failure: str = ""  # a change that could not be made, in one sentence

    def reply(self, result: cmds.CommandResult, requester_id: Snowflake | None) -> str:
        """The command's reply: for `forget`, how much went; else the executor's text."""
        if self.failure:
            return self.failure
        if self.forgotten:
            return cmds.forgotten_reply(self.forgotten, requester_id)
        if any(isinstance(c, cmds.ForgetUser) for c in result.changes):
            return FORGET_FAILED
        return result.reply


async def apply_changes(
    changes: Sequence[cmds.Change],
    *,
    store: AdminQueries,
    settings: CurrentSettings,
    home: Path,
    chat_id: Snowflake | None,
    now: float,
) -> Applied:
    """Store every change of one command; returns the poll it asks to start and what it
    forgot."""
    poll: cmds.StartPoll | None = None
    forgotten: list[cmds.Forgotten] = []
    failure = ""
    for change in changes:
        if isinstance(change, cmds.TrustChange):
            if change.tier is None:
                store.remove_trust(change.user_id)
            else:
                store.set_tier(change.user_id, change.tier.label)
        elif isinstance(change, cmds.ConfigChange):
            store.set_runtime_config(change.key, change.value)
            settings.refresh(force=True)
        elif isinstance(change, cmds.AttentionChange) and chat_id is not None:
            store.set_attention_mode(chat_id, change.mode, now)
            await ensure_chat_home(home, chat_id)
        elif isinstance(change, cmds.UserAttentionChange) and chat_id is not None:
            if change.mode is None:
                store.delete_user_attention(chat_id, change.user_id)
            else:
                store.set_user_attention(chat_id, change.user_id, change.mode, now)
        elif isinstance(change, ChatSettingChange) and chat_id is not None:
            try:
                await apply_chat_setting(change, store=store, home=home, chat_id=chat_id, now=now)
            except Exception as exc:
                logger.error("chat %s: its %s could not be saved: %s", chat_id, change.field, exc)
                failure = PROMPT_FAILED
        elif isinstance(change, cmds.StartPoll):
            poll = change
        elif isinstance(change, cmds.ForgetUser):
            try:
                forgotten.append(await forget_user(store, change.user_id))
            except Exception as exc:
                logger.error("could not forget user %s: %s", change.user_id, exc)
    if changes:
        # Trust and config changes are durable before anyone is told they are made.
        try:
            await store.flush()
        except DatabaseUnreachable:
            failure = failure or NOT_SAVED_YET  # kept, and committed once it is back
        except Exception as exc:
            logger.error("a command's change may not be saved: %s", exc)
    return Applied(poll, tuple(forgotten), failure)


async def apply_chat_setting(
    change: ChatSettingChange,
    *,
    store: ChatConfigQueries,
    home: Path,
    chat_id: Snowflake,
    now: float,
) -> None:
    """Store one of the chat's own settings: the agent prompt as a commit in its chat home,
    the discriminator model and threshold in `chat_config`.

    Raises:
        ChatHomeError: the prompt could not be written (the caller says so).
    """
    if change.field == "prompt":
        chat_home = ChatHome(home, str(chat_id))
        if change.value is None:
            await trio.to_thread.run_sync(chat_home.reset_agent_prompt, AGENT_PROMPT_RESET)
        else:
            text = str(change.value)
            await trio.to_thread.run_sync(chat_home.write_agent_prompt, text, AGENT_PROMPT_SET)
        return
    own = store.get_chat_config(chat_id)
    model = own.discriminator_model if own is not None else None
    threshold = own.discriminator_threshold if own is not None else None
    if change.field == "model":
        model = None if change.value is None else str(change.value)
    else:
        threshold = None if change.value is None else float(change.value)
    store.set_discriminator(chat_id, model, threshold, now)


async def forget_user(store: AdminQueries, user_id: Snowflake) -> cmds.Forgotten:
    """Delete what `user_id` said from memory (one transaction); what went, counted."""
    messages, observations = await store.forget_user(user_id)
    return cmds.Forgotten(user_id, messages, observations)


async def ensure_chat_home(home: Path, chat_id: Snowflake) -> None:
    """Create the chat's home (its prompt repository); a failure is a warning, not a crash."""
    try:
        await trio.to_thread.run_sync(ChatHome(home, str(chat_id)).ensure)
    except Exception as exc:
        logger.warning("chat home for %s not ready: %s", chat_id, exc)
