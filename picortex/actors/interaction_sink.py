"""A slash command's `AnswerSink` (SPEC 15): it owns the interaction's initial response.

Discord takes one initial response per interaction, within 3 s: a message (type 4) or a
deferral (type 5), after which the answer edits `@original`. Two parties may send it: the
channel actor, answering, and the deferral timer the router starts, when the channel is
late. Whoever comes first wins; the states and the moves between them are one table.
Interaction tokens travel only in request paths and are never written to a log line.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import trio

from picortex.actors.interactions import (
    FOLLOW_UP_TIMEOUT_SECONDS,
    RESPONSE_DEADLINE_SECONDS,
    AnswerSurface,
    InteractionAnswers,
    message_body,
    note_failure,
    reply_event,
)
from picortex.core import slash as sl
from picortex.core.split import split_reply
from picortex.types import Interaction, Snowflake


class AckState(enum.Enum):
    """Where the interaction's initial response stands."""

    PENDING = "pending"  # nothing sent yet
    RESPONDED = "responded"  # the answer itself was the initial response
    DEFERRING = "deferring"  # a deferral is on its way
    DEFERRED = "deferred"  # deferred: the answer edits `@original`
    FAILED = "failed"  # the deferral was refused: nothing more can reach the person


class AckEvent(enum.Enum):
    """What happens to the initial response."""

    RESPOND = "respond"
    DEFER = "defer"
    DEFER_SENT = "defer sent"
    DEFER_REFUSED = "defer refused"


# The only moves there are; anything else is a bug.
ACK_TRANSITIONS: Final[dict[tuple[AckState, AckEvent], AckState]] = {
    (AckState.PENDING, AckEvent.RESPOND): AckState.RESPONDED,
    (AckState.PENDING, AckEvent.DEFER): AckState.DEFERRING,
    (AckState.DEFERRING, AckEvent.DEFER_SENT): AckState.DEFERRED,
    (AckState.DEFERRING, AckEvent.DEFER_REFUSED): AckState.FAILED,
}


class InteractionSink:
    """Answers one interaction; see the module docstring.

    Args:
        clients: Discord's interaction routes, the action log, where a refused token goes.
        interaction: the interaction answered.
        ephemeral: whether a deferral promises a private answer (judged by the router).
    """

    command: str | None = sl.Ask.NAME  # what a model's answer through this sink is logged as

    def __init__(
        self, clients: InteractionAnswers, interaction: Interaction, *, ephemeral: bool
    ) -> None:
        self._clients = clients
        self.interaction = interaction
        self.ephemeral = ephemeral
        self.state = AckState.PENDING
        self._deferral_over = trio.Event()  # set once a deferral is sent or refused
        self._answered = False
        self._surface: AnswerSurface | None = None

    def _move(self, event: AckEvent) -> None:
        self.state = ACK_TRANSITIONS[(self.state, event)]

    # ----- the initial response --------------------------------------------------------------

    async def defer_at(self, deadline: float) -> None:
        """The router's timer: defer at `deadline` unless the channel has answered by then."""
        await trio.sleep_until(deadline)
        if self.state is AckState.PENDING:
            await self._defer()

    async def acknowledge(self) -> None:
        """Defer now (an `ask`: "thinking..."), unless the timer has; returns once it is over."""
        if self.state is AckState.PENDING:
            await self._defer()
        else:
            await self._deferral_over.wait()

    async def _defer(self) -> None:
        self._move(AckEvent.DEFER)
        try:
            sent = await self._send_deferral()
            self._move(AckEvent.DEFER_SENT if sent else AckEvent.DEFER_REFUSED)
        finally:
            if self.state is AckState.DEFERRING:  # cancelled on the way: nothing came of it
                self._move(AckEvent.DEFER_REFUSED)
            self._deferral_over.set()

    async def _send_deferral(self) -> bool:
        inter = self.interaction
        response: dict[str, Any] = {"type": sl.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE}
        if self.ephemeral:
            response["data"] = {"flags": sl.EPHEMERAL}
        try:
            with trio.fail_after(RESPONSE_DEADLINE_SECONDS):
                await self._clients.rest.create_interaction_response(
                    inter.id, inter.token, response
                )
        except Exception as exc:
            note_failure(self._clients, inter, "deferral", exc)
            return False
        self._clients.events.emit(
            "interaction", action="deferred", interaction_id=inter.id, channel_id=inter.channel_id
        )
        return True

    async def _claim(self) -> str:
        """Take the right to answer: `respond` (nobody has), `edit` (deferred), `lost`."""
        if self.state is AckState.PENDING:
            self._move(AckEvent.RESPOND)
            return "respond"
        await self._deferral_over.wait()
        return "edit" if self.state is AckState.DEFERRED else "lost"

    # ----- answers ---------------------------------------------------------------------------

    async def respond(
        self, text: str, *, ephemeral: bool, command: str | None, refused: bool = False
    ) -> bool:
        """Answer with a message (type 4), or by editing the deferral when the timer came
        first; past 2000 characters the rest follows as follow-ups.

        Logs a `reply` event naming `command` (and `refused` for a refusal); returns False
        (after logging why) when the answer did not reach Discord.
        """
        clients = self._clients
        inter = self.interaction
        claim = await self._claim()
        if claim == "edit":
            try:
                await self.edit_deferred(
                    text, command=command, ephemeral=ephemeral, refused=refused
                )
            except Exception:
                return False  # logged by edit_deferred
            return True
        if claim == "lost":
            reply_event(
                clients, inter, command, ephemeral, "failed", len(text), None, refused=refused
            )
            return False
        chunks = split_reply(text) or ["(empty answer)"]
        rest = clients.rest
        try:
            with trio.fail_after(RESPONSE_DEADLINE_SECONDS):
                await rest.create_interaction_response(
                    inter.id,
                    inter.token,
                    {
                        "type": sl.CHANNEL_MESSAGE_WITH_SOURCE,
                        "data": message_body(chunks[0], ephemeral=ephemeral),
                    },
                )
            with trio.fail_after(FOLLOW_UP_TIMEOUT_SECONDS):
                for chunk in chunks[1:]:
                    await rest.create_followup_message(
                        inter.application_id, inter.token, message_body(chunk, ephemeral=ephemeral)
                    )
        except Exception as exc:
            note_failure(clients, inter, "response", exc)
            reply_event(
                clients, inter, command, ephemeral, "failed", len(text), exc, refused=refused
            )
            return False
        reply_event(clients, inter, command, ephemeral, "posted", len(text), None, refused=refused)
        return True

    async def edit_deferred(
        self,
        text: str,
        *,
        command: str | None,
        ephemeral: bool = False,
        refused: bool = False,
    ) -> list[Snowflake]:
        """Put the answer into the deferred response; the rest past 2000 characters follows.

        Returns the ids of the messages written; raises when the first edit fails.
        """
        clients = self._clients
        inter = self.interaction
        chunks = split_reply(text) or ["(empty answer)"]
        rest = clients.rest
        posted: list[Snowflake] = []
        try:
            with trio.fail_after(FOLLOW_UP_TIMEOUT_SECONDS):
                first = await rest.edit_original_interaction_response(
                    inter.application_id, inter.token, message_body(chunks[0], ephemeral=False)
                )
                posted.append(int(first.get("id", 0) or 0))
                for chunk in chunks[1:]:
                    data = await rest.create_followup_message(
                        inter.application_id, inter.token, message_body(chunk, ephemeral=ephemeral)
                    )
                    posted.append(int(data.get("id", 0) or 0))
        except Exception as exc:
            note_failure(clients, inter, "answer", exc)
            reply_event(
                clients,
                inter,
                command,
                ephemeral,
                "failed",
                len(text),
                exc,
                parts=len(posted),
                refused=refused,
            )
            raise
        reply_event(
            clients,
            inter,
            command,
            ephemeral,
            "posted",
            len(text),
            None,
            parts=len(posted),
            ids=posted,
            refused=refused,
        )
        return posted

    async def post(self, text: str, *, command: str | None = None) -> None:
        """The model's answer to an `ask`: it edits the deferral."""
        self._answered = True
        await self._deferral_over.wait()
        await self.edit_deferred(text, command=command or self.command)

    def surface(self) -> AnswerSurface:
        """A streamed `ask` answer grows in the deferred response (SPEC 15, 16)."""
        self._surface = AnswerSurface(self._clients, self.interaction, self._deferral_over.wait)
        return self._surface

    async def post_poll(self, text: str) -> Snowflake | None:
        """A poll started by slash command: its question is the interaction's public response."""
        if not await self.respond(text, ephemeral=False, command="poll"):
            return None
        return await self.original_message_id()

    async def fail(self, sentence: str) -> None:
        """An `ask` that got no answer still gets one sentence saying why."""
        if self._answered or (self._surface is not None and self._surface.message_ids):
            return
        self._answered = True
        await self._deferral_over.wait()
        try:
            await self.edit_deferred(sentence, command=self.command)
        except Exception:
            return  # logged by edit_deferred

    # ----- the rest of what an interaction gets ------------------------------------------------

    async def original_message_id(self) -> Snowflake | None:
        """The id of the interaction's first response message, when Discord tells it."""
        inter = self.interaction
        try:
            data = await self._clients.rest.get_original_interaction_response(
                inter.application_id, inter.token
            )
            return int(data["id"])
        except Exception as exc:
            note_failure(self._clients, inter, "original response", exc)
            return None

    async def autocomplete(self, choices: list[dict[str, str]]) -> None:
        """Answer an autocomplete interaction (type 8) with up to 25 choices."""
        inter = self.interaction
        try:
            with trio.fail_after(RESPONSE_DEADLINE_SECONDS):
                await self._clients.rest.create_interaction_response(
                    inter.id,
                    inter.token,
                    {
                        "type": sl.APPLICATION_COMMAND_AUTOCOMPLETE_RESULT,
                        "data": {"choices": choices[: sl.MAX_CHOICES]},
                    },
                )
        except Exception as exc:
            note_failure(self._clients, inter, "autocomplete", exc)
