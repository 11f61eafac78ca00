"""Running a command (SPEC 6), typed or slash, and the `decision` and `trigger` lines a
channel writes about what it decided."""

from __future__ import annotations

import time

from picortex import config as config_mod
from picortex.actors import agent_voice, chats
from picortex.actors.channel_clients import ChannelClients, ChatReads
from picortex.core import commands as cmds
from picortex.core.access import with_roles
from picortex.core.triggerlog import entry_from_message
from picortex.core.trust import Tier, tier_of
from picortex.store.chathome import ChatHome
from picortex.types import EventSink, Message, Snowflake


def tier_label(tier: Tier | None) -> str:
    """A requester's tier as the log names it (`untrusted` for someone not on the list)."""
    return tier.label if tier is not None else "untrusted"


def requester_tier(
    clients: ChatReads, author: Snowflake, roles: tuple[Snowflake, ...] = ()
) -> Tier | None:
    """The author's trust tier (SPEC 3); an allowed role counts as `user` (SPEC 18); None
    when not trusted."""
    settings = clients.settings()
    owner_id = settings.owner_id
    stored = None if author == owner_id else clients.store.get_tier(author)
    listed = tier_of(author, owner_id, {author: stored} if stored else {})
    return with_roles(listed, roles, settings.access.allow_roles)


def chat_mode(clients: ChatReads, msg: Message) -> str:
    """The attention mode in force where `msg` was sent."""
    return chats.attention_mode(clients.store, clients.registry, msg, clients.settings().attention)


def decision_event(
    events: EventSink, msg: Message, outcome: str, reason: str, **extra: object
) -> None:
    """The `decision` line on a message: what was decided, and why."""
    events.emit(
        "decision",
        message_id=msg.id,
        channel_id=msg.channel_id,
        guild_id=msg.guild_id,
        author_id=msg.author.id,
        outcome=outcome,
        reason=reason,
        **extra,
    )


def trigger_event(events: EventSink, msg: Message, tier: Tier | None, **extra: object) -> None:
    """The `trigger` line: a request the bot acts on."""
    events.emit(
        "trigger",
        message_id=msg.id,
        channel_id=msg.channel_id,
        guild_id=msg.guild_id,
        author_id=msg.author.id,
        author=msg.author.username,
        tier=tier_label(tier),
        **extra,
    )


async def execute(
    clients: ChannelClients,
    msg: Message,
    command: cmds.Command,
    command_text: str,
    tier: Tier | None,
    *,
    source: str | None = None,
) -> tuple[str, str, cmds.StartPoll | None, cmds.CommandResult]:
    """Run a command (typed or slash) through the executor, apply and log its changes.

    Returns its name, the reply text, the poll to start (if any) and the result.
    """
    settings = clients.chat.settings()
    name = cmds.command_name(command)
    chat_id = msg.channel_id
    mode = chat_mode(clients.chat, msg)
    # Relative to the home: the machine's own paths are nobody's business in a chat.
    prompt_path = ChatHome(clients.chat.home, str(chat_id)).prompt_path.relative_to(
        clients.chat.home
    )
    state = cmds.CommandState(
        owner_id=settings.owner_id,
        trust=dict(clients.chat.store.trust_list()),
        wakeword=settings.wakeword,
        attention_mode=mode,
        prompt_path=f"PICORTEX_HOME/{prompt_path.as_posix()}",
        poll_enabled=settings.poll_enabled,
        poll_seconds=settings.poll_seconds,
        config_values=config_mod.runtime_values(settings),
        parse_config_value=config_mod.parse_runtime_value,
        format_config_value=config_mod.format_value,
        requester_id=msg.author.id,
        user_modes=chats.user_modes(clients.chat.store, chat_id),
        access_note=chats.mode_choice(
            clients.chat.store, clients.chat.registry, msg, settings.attention, settings.access
        ).blocked,
        chat=await agent_voice.chat_settings(
            clients.chat.home, clients.chat.store, chat_id, settings.discriminator.model
        ),
    )
    result = cmds.execute(command, tier, state)
    applied = await clients.records.apply_command_changes(
        result.changes, chat_id=chat_id, now=time.time()
    )
    reply = applied.reply(result, msg.author.id)
    label = tier_label(tier)
    trigger_event(clients.records.events, msg, tier, mode=mode, command=name)
    forgot = {
        "forgotten": [
            {"user_id": f.user_id, "messages": f.messages, "observations": f.observations}
            for f in applied.forgotten
        ]
    }
    clients.records.events.emit(
        "command",
        message_id=msg.id,
        channel_id=msg.channel_id,
        requester=msg.author.id,
        tier=label,
        command=name,
        text=command_text[:200],
        result=result.outcome,
        **({"source": source} if source else {}),
        **(forgot if applied.forgotten else {}),
    )
    for f in applied.forgotten:
        clients.records.triggers.forget_author(f.user_id)
    clients.records.triggers.add(
        entry_from_message(msg, trusted=tier is not None, command=command_text)
    )
    article = "an" if label[0] in "aeiou" else "a"
    decision_event(clients.records.events, msg, "command", f"{name} command from {article} {label}")
    return name, reply, applied.poll, result
