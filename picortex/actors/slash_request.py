"""A slash command as a request: the one place an interaction becomes what its channel
handles (`slash_request`, called by the router as it builds the `Delivery`)."""

from __future__ import annotations

import attrs

from picortex.actors.interactions import as_message
from picortex.core import commands as cmds
from picortex.core import continuation as cont
from picortex.core import slash as sl
from picortex.types import Interaction, Message, Snowflake


@attrs.frozen
class SlashRequest:
    """A slash command (or its autocomplete) as its channel handles it.

    Attributes:
        interaction: the interaction as Discord sent it (who asked, and how to answer).
        action: what the command asks for.
        text: the command as typed text would say it (`set mode quiet`).
        message: the command as the message a typed command would have been (the log and
            the executor take it).
    """

    interaction: Interaction
    action: sl.SlashAction
    text: str
    message: Message

    @property
    def id(self) -> Snowflake:
        """The interaction's id."""
        return self.interaction.id

    @property
    def channel_id(self) -> Snowflake:
        """The channel the command was used in."""
        return self.interaction.channel_id

    def ask(self) -> tuple[cont.Request, Message]:
        """An `ask` as a request to answer, and its trigger (the question alone)."""
        assert isinstance(self.action, sl.Ask)
        question = self.action.text
        msg = self.message
        request = cont.Request(
            parent_id=msg.id,
            channel_id=msg.channel_id,
            author_id=msg.author.id,
            message_ids=(msg.id,),
            texts=(question,),
        )
        return request, attrs.evolve(msg, content=question)


def slash_request(interaction: Interaction) -> SlashRequest:
    """The one place an application command interaction becomes a request."""
    action = sl.action_for(interaction)
    text = sl.render_action(action)
    return SlashRequest(
        interaction, action, text, as_message(interaction, f"{cmds.SLASH_PREFIX} {text}")
    )
