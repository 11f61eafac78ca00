"""The continuation window (SPEC 5 step 4): follow-ups join the request they continue.

The window is measured on Discord's clock: each message's own time (`Message.sent_at`, from
its snowflake), never when this process received it. After a restart a replayed trigger and
a message sent ten seconds after it arrive together, and are still two requests.

Intended use by the channel actor (one `ContinuationState` per channel actor, which is
harmless to share across channels as keys include the channel)::

    state = ContinuationState(settings.continuation_seconds)
    # for each message that passed steps 1-3 (not ignored, trusted, not a command):
    state, outcome = on_message(state, msg, trusted, text=strip_mention(...))
    match outcome:
        case FollowUp(request):  # log `continuation`; no answer: context for the next request
        case RestartAnswer(request):   # log `continuation`; cancel the running generation,
                                 # then generate an answer to request.text
        case NotInWindow():      # attention gating (step 5); if it says respond:
            state, new = on_trigger(state, msg, text=...)
            # log `trigger`; generate an answer to new.request.text
    # before posting an answer: post only if not is_superseded(state, request)
    # after the answer is posted (or generation failed / was skipped):
    state = on_answered(state, request)
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from picortex.types import Message, Snowflake

WindowKey = tuple[Snowflake, Snowflake]  # (channel_id, author_id)


@attrs.frozen
class Request:
    """A trigger and its follow-ups, merged into one request.

    `generation` counts the answers started for this request (0 for the trigger's own);
    an answer of an older generation than the window's is superseded and not posted.
    """

    parent_id: Snowflake  # the trigger's message id, also its trigger-log entry id
    channel_id: Snowflake
    author_id: Snowflake
    message_ids: tuple[Snowflake, ...]
    texts: tuple[str, ...]
    generation: int = 0

    @property
    def text(self) -> str:
        """The merged request: the trigger's text and each follow-up, one per line."""
        return "\n".join(t for t in self.texts if t)

    @property
    def key(self) -> WindowKey:
        """The (channel, author) this request belongs to."""
        return (self.channel_id, self.author_id)


@attrs.frozen
class ContinuationWindow:
    """One open window: the request, when it opened and closes, whether an answer is being
    generated. Times are Discord's (Unix seconds): `opened` is the trigger's, `deadline` the
    newest message's plus the window."""

    request: Request
    opened: float
    deadline: float
    generating: bool = True

    def holds(self, sent_at: float) -> bool:
        """Whether a message sent at `sent_at` (Discord's clock) falls in this window.

        One sent before the trigger is no follow-up, whenever it is delivered.
        """
        return self.opened <= sent_at <= self.deadline


@attrs.frozen
class ContinuationState:
    """All open windows, by (channel, author).

    A trigger opens a window until `seconds` after it was sent; each follow-up from the
    same trusted author in the same channel, sent before the deadline, resets it (Discord's
    clock throughout; 0 seconds: no window). A request is answered once: a follow-up
    during generation restarts it with the merged request; one after the answer was posted
    is context for the next request, never a new answer (SPEC 5 step 4).
    """

    seconds: float
    windows: Mapping[WindowKey, ContinuationWindow] = attrs.field(factory=dict)


@attrs.frozen
class NewTrigger:
    """A trigger opened a window: answer `request.text`."""

    request: Request


@attrs.frozen
class FollowUp:
    """A follow-up after the answer was posted: context for the next request, not answered.

    `request` is the answered one, with this message joined, for the log and the status.
    """

    request: Request

    @property
    def parent_id(self) -> Snowflake:
        """The trigger this follow-up joins."""
        return self.request.parent_id

    @property
    def text(self) -> str:
        """The merged request text."""
        return self.request.text


@attrs.frozen
class RestartAnswer:
    """A follow-up while the answer is being generated: cancel it, answer `request.text`."""

    request: Request

    @property
    def parent_id(self) -> Snowflake:
        """The trigger this follow-up joins."""
        return self.request.parent_id

    @property
    def text(self) -> str:
        """The merged request text."""
        return self.request.text


@attrs.frozen
class NotInWindow:
    """Not a follow-up; `reason` is for the `decision` log line."""

    reason: str


WindowOutcome = FollowUp | RestartAnswer | NotInWindow


def expire(state: ContinuationState, now: float) -> ContinuationState:
    """Drop the windows whose deadline is before `now` (Discord's clock)."""
    live = {k: w for k, w in state.windows.items() if now <= w.deadline}
    if len(live) == len(state.windows):
        return state
    return attrs.evolve(state, windows=live)


def window_for(
    state: ContinuationState, channel_id: Snowflake, author_id: Snowflake, sent_at: float
) -> ContinuationWindow | None:
    """The window of (channel, author) that a message sent at `sent_at` falls in, if any."""
    window = state.windows.get((channel_id, author_id))
    if window is None or state.seconds <= 0 or not window.holds(sent_at):
        return None
    return window


def _with(state: ContinuationState, window: ContinuationWindow) -> ContinuationState:
    windows = dict(state.windows)
    windows[window.request.key] = window
    return attrs.evolve(state, windows=windows)


def on_message(
    state: ContinuationState,
    msg: Message,
    trusted: bool,
    *,
    text: str | None = None,
) -> tuple[ContinuationState, WindowOutcome]:
    """Decide whether `msg` continues an open request, by when Discord says it was sent.

    Args:
        state: the current windows.
        msg: a message that passed steps 1-3 (not ignored, not a command).
        trusted: whether the author is trusted; untrusted messages never join a request.
        text: the message's text for the request (default: its content).
    """
    now = msg.sent_at
    state = expire(state, now)
    if not trusted:
        return state, NotInWindow("untrusted author")
    window = window_for(state, msg.channel_id, msg.author.id, now)
    if window is None:
        return state, NotInWindow("no open continuation window")
    if msg.id in window.request.message_ids:
        return state, NotInWindow("already part of the request")
    old = window.request
    if not window.generating:
        # The answer is posted: the request is closed; the window only stays open (and
        # resets), so the lines that follow are context rather than new requests.
        joined = attrs.evolve(
            old,
            message_ids=(*old.message_ids, msg.id),
            texts=(*old.texts, msg.content if text is None else text),
        )
        state = _with(state, _reset(window, joined, now, state.seconds, generating=False))
        return state, FollowUp(joined)
    request = attrs.evolve(
        old,
        message_ids=(*old.message_ids, msg.id),
        texts=(*old.texts, msg.content if text is None else text),
        generation=old.generation + 1,
    )
    state = _with(state, _reset(window, request, now, state.seconds, generating=True))
    return state, RestartAnswer(request)


def _reset(
    window: ContinuationWindow,
    request: Request,
    sent_at: float,
    seconds: float,
    *,
    generating: bool,
) -> ContinuationWindow:
    """The window after a follow-up sent at `sent_at`: it runs `seconds` past the newest
    message (one delivered out of order never shortens it)."""
    deadline = max(window.deadline, sent_at + seconds)
    return ContinuationWindow(request, window.opened, deadline, generating=generating)


def on_trigger(
    state: ContinuationState, msg: Message, *, text: str | None = None
) -> tuple[ContinuationState, NewTrigger]:
    """Open a window at a trigger, from when it was sent (replacing any older one of the
    same author here).

    The window starts in the generating phase: the actor answers right away.
    """
    now = msg.sent_at
    state = expire(state, now)
    request = Request(
        parent_id=msg.id,
        channel_id=msg.channel_id,
        author_id=msg.author.id,
        message_ids=(msg.id,),
        texts=(msg.content if text is None else text,),
    )
    window = ContinuationWindow(request, now, now + state.seconds)
    return _with(state, window), NewTrigger(request)


def on_answered(state: ContinuationState, request: Request) -> ContinuationState:
    """Record that the answer to `request` is done (posted, failed or skipped).

    Ignored when a newer generation of the same request has started since.
    """
    window = state.windows.get(request.key)
    if (
        window is None
        or window.request.parent_id != request.parent_id
        or window.request.generation != request.generation
        or not window.generating
    ):
        return state
    return _with(state, attrs.evolve(window, generating=False))


def is_superseded(state: ContinuationState, request: Request) -> bool:
    """True when a follow-up has restarted `request`, so its answer must not be posted."""
    window = state.windows.get(request.key)
    return (
        window is not None
        and window.request.parent_id == request.parent_id
        and window.request.generation > request.generation
    )
