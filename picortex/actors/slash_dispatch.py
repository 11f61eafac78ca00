"""Slash commands in their channel (SPEC 15): the same trust tiers and executor as typed
commands, answered through the interaction's sink.

Every command gets an answer whatever the chat's attention mode: a message, or for `ask` a
deferral at once and the model's answer as its edit (the channel generates it like any
other answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from picortex import config as config_mod
from picortex.actors import interactions
from picortex.actors.channel_clients import ChannelClients
from picortex.actors.command_run import chat_mode, decision_event, execute, trigger_event
from picortex.actors.command_run import requester_tier as tier_of_requester
from picortex.actors.delivery import AnswerSink
from picortex.actors.slash_request import SlashRequest
from picortex.core import commands as cmds
from picortex.core import continuation as cont
from picortex.core import slash as sl
from picortex.core.triggerlog import entry_from_message
from picortex.core.trust import may_run
from picortex.types import InteractionType, Message


@runtime_checkable
class SlashSink(AnswerSink, Protocol):
    """An interaction's answer sink (`InteractionSink`): besides a model's answer, it takes a
    command's response, autocomplete choices, and tells the response's message id."""

    async def respond(
        self, text: str, *, ephemeral: bool, command: str | None, refused: bool = False
    ) -> bool:
        """Answer with a message; False when it did not reach Discord."""
        ...

    async def autocomplete(self, choices: list[dict[str, str]]) -> None:
        """Offer autocomplete choices."""
        ...


class ChannelSide(Protocol):
    """What a slash command needs of its channel's actor."""

    def spawn(self, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` as one of the channel's tasks."""
        ...

    def answer(self, request: cont.Request, trigger: Message, sink: AnswerSink) -> None:
        """Generate the answer to an `ask` in the channel's reply order."""
        ...


async def dispatch(
    clients: ChannelClients, side: ChannelSide, slash: SlashRequest, sink: SlashSink
) -> None:
    """Handle one slash command or autocomplete interaction."""
    inter = slash.interaction
    clients.chat.settings.refresh()
    if inter.user.bot or inter.user.id == clients.chat.bot.user_id:
        return
    author = inter.user.id
    tier = tier_of_requester(clients.chat, author, inter.member_roles)
    if inter.type == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
        # Config keys are for those who may change config; others see no suggestions.
        allowed = tier is not None and may_run("config", tier)
        choices = sl.autocomplete_choices(inter, config_mod.RUNTIME_KEYS) if allowed else []
        side.spawn(lambda: sink.autocomplete(choices))
        return
    if inter.type != InteractionType.APPLICATION_COMMAND:
        return
    action, msg = slash.action, slash.message
    events = clients.records.events

    def reply(answer: str, *, ephemeral: bool, command: str | None, refused: bool = False) -> None:
        side.spawn(
            lambda: sink.respond(answer, ephemeral=ephemeral, command=command, refused=refused)
        )

    if tier is None and not cmds.forgets_only_requester(action, author):
        decision_event(
            events, msg, "ignore", "slash command from an untrusted user: refused privately"
        )
        reply(interactions.REFUSAL, ephemeral=True, command=sl.name_of(action), refused=True)
        return
    if isinstance(action, sl.NotOurs):
        decision_event(events, msg, "ignore", f"unknown application command /{action.name}")
        reply(f"This bot answers `/{sl.COMMAND_NAME}` only.", ephemeral=True, command=None)
        return
    if isinstance(action, sl.Ask):
        if tier is not None:
            mode = chat_mode(clients.chat, msg)
            decision_event(events, msg, "respond", "slash command: always answered", mode=mode)
            trigger_event(events, msg, tier, mode=mode, command=sl.Ask.NAME)
            clients.records.triggers.add(entry_from_message(msg, trusted=True, command=msg.content))
            side.spawn(sink.acknowledge)
            side.answer(*slash.ask(), sink)
        return
    name, answer, poll, result = await execute(
        clients, msg, action, slash.text, tier, source="slash"
    )
    ephemeral = sl.answer_is_private(
        name,
        trusted=tier is not None,
        ok=result.ok,
        target=clients.posting.replies.reply_target(name),
    )
    if poll is None:
        reply(answer, ephemeral=ephemeral, command=name)
        return
    from picortex.actors.polls import run_poll

    # Its question is the response, posted by the poll like a typed poll's (the same text).
    clients.posting.spawn(run_poll, clients.polls, msg, poll, sink)
