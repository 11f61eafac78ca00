"""A streamed reply (SPEC 16): the answer shown in Discord as the model writes it.

`StreamedReply.feed` is the model call's text callback; `run` is the writer task. It posts
the first message once the first sentence is ready (never a placeholder), then edits it as
the text grows, never sooner than EDIT_INTERVAL_SECONDS after its previous write came back,
so Discord sees no two edits closer than that; past 2000 characters it posts the next
message. `finish` gives the final text (the full answer, or what arrived plus the cut
notice) and the writer settles the messages on it, still paced, then returns. `handed_over`
lets the model call finish its own bookkeeping behind the answer's first post, not before it.

Where the messages go is a `ReplySurface`: channel messages here; an interaction's
original response and follow-ups fit the same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import attrs
import trio

from picortex.core import policy
from picortex.core import stream as core
from picortex.core.llm import LLMResult
from picortex.discord.http import when_sent
from picortex.types import Snowflake

logger = logging.getLogger(__name__)

# An answer that came back empty still gets a visible reply (as non-streamed ones do).
EMPTY_ANSWER = "(empty answer)"
# The most the end of a model call (reading the response out, pricing, logging) waits for a
# whole answer's first post to be on its way: that post waits only for its turn in the
# channel, which is almost always now; a later turn is not worth holding the call for.
HANDOVER_SECONDS: Final = 0.2


class ReplySurface(Protocol):
    """Where a streamed reply's messages are written."""

    async def post(self, index: int, text: str) -> None:
        """Post message `index` (0: the reply itself; later ones continue it)."""
        ...

    async def edit(self, index: int, text: str) -> None:
        """Change message `index` to `text`."""
        ...


class StreamedReply:
    """One streamed answer being written to a surface.

    Args:
        surface: where the messages go.
        before_first_post: awaited once, just before the first post (the reply's turn in
            the channel's order); returning False means the answer must not be posted:
            the writer stops and `abandoned` is set.
        edit_interval: the least time between two writes' answers and the next edit.
    """

    def __init__(
        self,
        surface: ReplySurface,
        *,
        before_first_post: Callable[[], Awaitable[bool]] | None = None,
        edit_interval: float = core.EDIT_INTERVAL_SECONDS,
    ) -> None:
        self._surface = surface
        self._before_first_post = before_first_post
        self._edit_interval = edit_interval
        self._text = ""
        self._final: str | None = None
        self._stopped = False
        self._changed = trio.Event()
        # Set once a write is on its way to Discord (or the writer has ended).
        self._went_out = trio.Event()
        self.shown: list[str] = []
        self.edits = 0
        self.abandoned = False
        self.failure: Exception | None = None
        self._last_write = -float("inf")

    @property
    def text(self) -> str:
        """The text received so far."""
        return self._text

    @property
    def shown_text(self) -> str:
        """What the messages show, joined."""
        return "".join(self.shown)

    @property
    def finished(self) -> bool:
        """True once the final text is given (`finish`)."""
        return self._final is not None

    @property
    def started(self) -> bool:
        """True once the first message is posted."""
        return bool(self.shown)

    def feed(self, text: str) -> None:
        """The answer so far (the model call's `on_text`); never blocks."""
        self._text = text
        self._changed.set()

    def finish(self, text: str) -> None:
        """The final text: the writer settles the messages on it and returns."""
        self._final = text or EMPTY_ANSWER
        self._changed.set()

    async def handed_over(self) -> None:
        """Return once the first post is on its way or the writer has ended, at most after
        HANDOVER_SECONDS: the caller's own work (a whole answer's model call closing and
        logging) then goes behind the answer instead of delaying it."""
        with trio.move_on_after(HANDOVER_SECONDS):
            await self._went_out.wait()

    def stop(self) -> None:
        """Nothing more will come and nothing more is to be written (the call failed)."""
        self._stopped = True
        self._changed.set()

    async def run(self) -> None:
        """Write until the final text is shown (or the reply is stopped or abandoned).

        A write that fails ends the writer with `failure` set; the caller decides.
        """
        try:
            await self._run()
        except Exception as exc:
            self.failure = exc
        finally:
            self._went_out.set()

    async def _run(self) -> None:
        # The first post: a whole sentence, the end of the answer, or never.
        while not self._stopped:
            target = self._final if self._final is not None else self._text
            if self._final is not None or core.first_sentence_ready(target):
                break
            await self._wait_change()
        if self._stopped:
            return
        if self._before_first_post is not None and not await self._before_first_post():
            self.abandoned = True
            return
        await self._write(can_edit=False)
        while True:
            final = self._final
            target = final if final is not None else self._text
            if final is not None and core.is_settled(self.shown, final):
                return
            if self._stopped:
                return
            if core.is_settled(self.shown, target):
                await self._wait_change()
                continue
            wait = self._last_write + self._edit_interval - trio.current_time()
            if wait > 0 and not core.next_writes(self.shown, target, can_edit=False):
                # Only edits are due: the text grows meanwhile, the next edit shows it all.
                await trio.sleep(wait)
                continue
            await self._write(can_edit=wait <= 0)

    async def _wait_change(self) -> None:
        await self._changed.wait()
        self._changed = trio.Event()

    async def _write(self, *, can_edit: bool) -> None:
        target = self._final if self._final is not None else self._text
        for write in core.next_writes(self.shown, target, can_edit=can_edit):
            with when_sent(self._went_out.set):
                if write.new:
                    await self._surface.post(write.index, write.text)
                else:
                    await self._surface.edit(write.index, write.text)
            # A surface that never says its request was written: its answer says so.
            self._went_out.set()
            if write.new:
                self.shown.append(write.text)
            else:
                self.shown[write.index] = write.text
                self.edits += 1
            self._last_write = trio.current_time()


class ChannelSurface:
    """A streamed reply as channel messages: the first replies to the trigger.

    Args:
        rest: the REST client (create_message, edit_message).
        plan: resolves where the reply goes, once, at the first post (a persona answer
            opens its thread then, not before the first sentence is ready).
    """

    def __init__(
        self,
        rest: Any,
        plan: Callable[[], Awaitable[policy.PostPlan]],
        *,
        timeout: float,
        trigger_id: Snowflake | None = None,
    ) -> None:
        self._rest = rest
        self._trigger_id = trigger_id
        self._plan = plan
        self._timeout = timeout
        self.channel_id: Snowflake | None = None
        self.target: str = "channel"
        self.message_ids: list[Snowflake] = []
        self._reply_to: Snowflake | None = None

    async def post(self, index: int, text: str) -> None:
        """Post the next message of the reply."""
        with trio.fail_after(self._timeout):
            if self.channel_id is None:
                plan = await self._plan()
                if plan.channel_id is None:
                    raise RuntimeError("a streamed reply needs a channel to post in")
                self.channel_id = plan.channel_id
                self.target = plan.target
                self._reply_to = plan.reply_to
            data = await self._rest.create_message(
                self.channel_id,
                text,
                reply_to=self._reply_to if index == 0 else None,
                allowed_mentions=policy.allowed_mentions(ping_users=False),
                # The same nonce as a whole answer's part (Replies.post): posted again after
                # a restart, Discord returns the message already there, which is then edited.
                **reply_nonce(self._trigger_id, "a", index),
            )
        self.message_ids.append(int(data["id"]))

    async def edit(self, index: int, text: str) -> None:
        """Change one message of the reply."""
        assert self.channel_id is not None
        with trio.fail_after(self._timeout):
            await self._rest.edit_message(
                self.channel_id,
                self.message_ids[index],
                text,
                allowed_mentions=policy.allowed_mentions(ping_users=False),
            )


def reply_nonce(trigger_id: Snowflake | None, part: str, index: int) -> dict[str, str]:
    """The enforced nonce of one chunk of one post made for `trigger_id`.

    Derived from the trigger, so the same chunk posted again (a trigger handled again after a
    kill that came between the post and its handled mark) is returned by Discord instead of
    posted twice. `part` is one letter telling a trigger's posts apart: `a` an answer, `c` a
    command's reply, `r` a poll's result. At most 25 characters: a snowflake, the letter and
    the chunk number.
    """
    if trigger_id is None:
        return {}
    return {"nonce": f"{trigger_id}{part}{index}"}


class AnswerSurface(ReplySurface, Protocol):
    """Where a streamed answer is written, and what the `reply` event says about it."""

    target: str
    channel_id: Snowflake | None
    message_ids: list[Snowflake]


@attrs.frozen
class Streamed:
    """How a streamed answer went: the call's result (None when the call was cancelled
    because the reply could not be posted), the reply, and where it went."""

    result: LLMResult | None
    reply: StreamedReply
    surface: AnswerSurface

    @property
    def message_ids(self) -> list[Snowflake]:
        """The ids of the reply's messages."""
        return self.surface.message_ids
