"""Sans-IO state machine for one Discord gateway session: events in, actions out.

No sockets, no clock reads, no trio: the caller feeds `connected`, `received`, `closed` and
`tick` with the current time and performs the actions it gets back (send, dispatch, close,
reconnect, fatal, report, notify).
"""

from __future__ import annotations

import random
import sys
from collections import deque
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Final, TypeGuard

import attrs
import orjson

# --- Discord constants --------------------------------------------------------------------

OP_DISPATCH: Final = 0
OP_HEARTBEAT: Final = 1
OP_IDENTIFY: Final = 2
OP_RESUME: Final = 6
OP_RECONNECT: Final = 7
OP_INVALID_SESSION: Final = 9
OP_HELLO: Final = 10
OP_HEARTBEAT_ACK: Final = 11

INTENT_GUILDS: Final = 1 << 0
INTENT_GUILD_MESSAGES: Final = 1 << 9
INTENT_GUILD_MESSAGE_REACTIONS: Final = 1 << 10
INTENT_DIRECT_MESSAGES: Final = 1 << 12
INTENT_DIRECT_MESSAGE_REACTIONS: Final = 1 << 13
INTENT_MESSAGE_CONTENT: Final = 1 << 15
# The SPEC's intents: guild and DM messages with their content, reactions, and guilds.
DEFAULT_INTENTS: Final = (
    INTENT_GUILDS
    | INTENT_GUILD_MESSAGES
    | INTENT_GUILD_MESSAGE_REACTIONS
    | INTENT_DIRECT_MESSAGES
    | INTENT_DIRECT_MESSAGE_REACTIONS
    | INTENT_MESSAGE_CONTENT
)

# Code we close with when we mean to resume: anything but 1000/1001 keeps the session alive;
# 4900 sits in the private-use range, so it never reads as one of Discord's own codes.
RESUME_CLOSE_CODE: Final = 4900
# Code we close with on a clean shutdown: it ends the session and shows the bot offline.
SHUTDOWN_CLOSE_CODE: Final = 1000
# Handing a shard to another process: any code but 1000/1001 keeps the session resumable.
HAND_BACK_CLOSE_CODE: Final = 4000
# Longest junk excerpt kept in a report, so a huge frame cannot flood the log.
EXCERPT_CHARS: Final = 200


@attrs.frozen
class CloseRule:
    """What a server close code means for us."""

    name: str
    fatal: bool = False
    resume: bool = True
    why: str = ""


# Discord's close-code table: fatal codes stop the bot, the rest reconnect, some afresh.
CLOSE_RULES: Final[Mapping[int, CloseRule]] = {
    1006: CloseRule("connection lost"),  # what websocket libraries report for a dropped socket
    4000: CloseRule("unknown error"),
    4001: CloseRule("unknown opcode", resume=False),
    4002: CloseRule("decode error"),
    4003: CloseRule("not authenticated", resume=False),
    4004: CloseRule(
        "authentication failed",
        fatal=True,
        why="the bot token was rejected; check DISCORD_BOT_TOKEN",
    ),
    4005: CloseRule("already authenticated", resume=False),
    4007: CloseRule("invalid seq", resume=False),
    4008: CloseRule("rate limited"),
    4009: CloseRule("session timed out", resume=False),
    4010: CloseRule(
        "invalid shard",
        fatal=True,
        why="the shard sent in IDENTIFY is not valid for this bot; check --shard ID/COUNT",
    ),
    4011: CloseRule(
        "sharding required",
        fatal=True,
        why="the bot is in too many guilds for one connection; run it sharded with --shard",
    ),
    4012: CloseRule(
        "invalid API version",
        fatal=True,
        why="Discord no longer accepts gateway API version 10; upgrade picortex",
    ),
    4013: CloseRule(
        "invalid intents",
        fatal=True,
        why="Discord rejected the intents value sent in IDENTIFY",
    ),
    4014: CloseRule(
        "disallowed intents",
        fatal=True,
        why=(
            "a privileged intent (Message Content) is not enabled for this bot; "
            "enable it in the Discord Developer Portal"
        ),
    ),
}
FATAL_CLOSE_CODES: Final = frozenset(code for code, rule in CLOSE_RULES.items() if rule.fatal)


def fatal_message(code: int) -> str:
    """The one sentence we print when Discord closes the gateway with a fatal code."""
    rule = CLOSE_RULES.get(code)
    if rule is None or not rule.fatal:
        return f"Discord closed the gateway with code {code}."
    return (
        f"Discord refused the gateway connection with close code {code} ({rule.name}): {rule.why}."
    )


# --- tunables -------------------------------------------------------------------------------


# Discord allows `max_concurrency` IDENTIFYs per 5 s. Ours in one bucket are spaced a quarter
# second more, so that network jitter never lands two of them within Discord's 5 s (an op 9
# would cost a 1-5 s pause and another attempt).
IDENTIFY_WINDOW: Final = 5.25


@attrs.frozen
class GatewayTimings:
    """Timing and limit knobs; the defaults follow Discord, tests shrink them."""

    # Exponential backoff between reconnects: base * 2**n, capped, times a jitter in [0.5, 1].
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    # Discord asks for a random wait of 1-5 s after an op 9 before identifying again.
    invalid_session_delay: tuple[float, float] = (1.0, 5.0)
    # A connection that says nothing for this long after opening is dead.
    hello_timeout: float = 20.0
    # Failed resumes in a row before we give the session up and identify afresh.
    resume_attempts: int = 3
    # Discord's send limit is 120 payloads per connection per 60 s; the window is counted
    # one second longer, so a slot is never reused at the very edge the server counts by.
    send_limit: int = 120
    send_window: float = 61.0
    # Seconds between two IDENTIFYs of one `max_concurrency` bucket (see IDENTIFY_WINDOW).
    identify_window: float = IDENTIFY_WINDOW


# --- actions --------------------------------------------------------------------------------


@attrs.frozen
class Send:
    """Send one payload on the socket. `kind` names it for logs; the payload may hold the token."""

    payload: dict[str, Any] = attrs.field(repr=False)
    kind: str


@attrs.frozen
class Dispatch:
    """Hand one DISPATCH event (op 0) on."""

    name: str
    data: Any
    seq: int | None


@attrs.frozen
class Close:
    """Close the socket with this code; then call `closed()` with it."""

    code: int
    reason: str


@attrs.frozen
class Reconnect:
    """Open a new connection after `delay` seconds, to the resume URL when `resume`."""

    resume: bool
    reason: str
    delay: float


@attrs.frozen
class Fatal:
    """Discord refused us for good: stop, say `reason`, exit 3."""

    code: int
    reason: str


@attrs.frozen
class Report:
    """Something was wrong with a frame or a request; log it, carry on."""

    problem: str
    excerpt: str = ""


@attrs.frozen
class Notify:
    """A lifecycle moment worth an action-log `gateway` event."""

    action: str
    fields: Mapping[str, object] = attrs.field(factory=dict)


Action = Send | Dispatch | Close | Reconnect | Fatal | Report | Notify


class GatewayState(StrEnum):
    """Where one gateway session stands."""

    DISCONNECTED = "disconnected"
    WAITING_HELLO = "waiting_hello"
    IDENTIFYING = "identifying"
    RESUMING = "resuming"
    READY = "ready"
    CLOSING = "closing"
    FATAL = "fatal"


# What `received()` parses as JSON text; anything else must already be parsed.
_RAW_TYPES: Final = (bytes, str, bytearray, memoryview)
# States in which a socket is open and heartbeats run.
_LIVE_STATES: Final = frozenset(
    {GatewayState.IDENTIFYING, GatewayState.RESUMING, GatewayState.READY}
)


@attrs.frozen
class GatewayStatus:
    """A snapshot of the gateway for `picortex status`."""

    state: str
    session_id: str | None
    seq: int | None
    heartbeat_latency_ms: float | None
    resume_gateway_url: str | None
    reconnects: int
    last_close_code: int | None
    shard: tuple[int, int]


# --- session start pacing -------------------------------------------------------------------


class IdentifyPacer:
    """Keeps IDENTIFY within Discord's session start limit, for every shard of this process.

    One IDENTIFY per `window` seconds in each rate-limit bucket (`shard_id % max_concurrency`:
    shards in different buckets may identify at once), and none once the daily `remaining`
    budget is spent until `reset_after` has passed.
    """

    def __init__(self, *, window: float = IDENTIFY_WINDOW) -> None:
        self._window = window
        self._max_concurrency = 1
        self._total: int | None = None
        self._remaining: int | None = None
        self._reset_at: float | None = None
        # Bucket -> when its last IDENTIFY was sent (or is booked to be).
        self._starts: dict[int, float] = {}

    @property
    def remaining(self) -> int | None:
        """Identifies left in the current day, as far as we know."""
        return self._remaining

    def bucket(self, shard_id: int) -> int:
        """The rate-limit bucket of a shard (Discord's `rate_limit_key`)."""
        return shard_id % self._max_concurrency

    def update(self, limit: object, now: float) -> Report | None:
        """Take `session_start_limit` from GET /gateway/bot; a Report if it is malformed."""
        if not isinstance(limit, Mapping):
            return Report("session_start_limit is missing or not an object", _excerpt(limit))
        concurrency = limit.get("max_concurrency")
        total = limit.get("total")
        remaining = limit.get("remaining")
        reset_after = limit.get("reset_after")
        if _is_int(concurrency) and concurrency > 0 and concurrency != self._max_concurrency:
            self._max_concurrency = concurrency
            # Buckets are numbered anew: every bucket waits as long as the latest start.
            latest = max(self._starts.values(), default=None)
            self._starts = {} if latest is None else dict.fromkeys(range(concurrency), latest)
        if _is_int(total) and total >= 0:
            self._total = total
        if _is_int(remaining) and remaining >= 0:
            self._remaining = remaining
        if _is_number(reset_after) and reset_after >= 0:
            self._reset_at = now + reset_after / 1000.0
        return None

    def delay(self, now: float, shard_id: int = 0) -> float:
        """Seconds to wait before shard `shard_id` may send its next IDENTIFY."""
        wait = 0.0
        if self._remaining is not None and self._remaining <= 0 and self._reset_at is not None:
            wait = max(wait, self._reset_at - now)
        last = self._starts.get(self.bucket(shard_id))
        if last is not None:
            wait = max(wait, last + self._window - now)
        return wait

    def record(self, now: float, shard_id: int = 0) -> None:
        """Count one IDENTIFY sent at `now` by shard `shard_id`."""
        key = self.bucket(shard_id)
        self._starts[key] = max(now, self._starts.get(key, now))
        if self._reset_at is not None and now >= self._reset_at:
            # The daily window rolled over: the budget is full again.
            self._remaining = self._total
            self._reset_at = None
        if self._remaining is not None:
            self._remaining = max(0, self._remaining - 1)


# --- the protocol ---------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _excerpt(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        text = bytes(value[: EXCERPT_CHARS * 4]).decode("utf-8", "replace")
    elif isinstance(value, str):
        text = value
    else:
        text = repr(value)
    return text[:EXCERPT_CHARS]


class GatewayProtocol:
    """One bot's gateway session across many connections.

    Feed it what happened; perform what it returns, in order. Every connection attempt ends
    with exactly one `closed()` call (also when connecting failed, or after a `Close` action
    it asked for), and `closed()` answers with the `Reconnect` or `Fatal` decision.
    """

    def __init__(
        self,
        token: str,
        *,
        shard: tuple[int, int] = (0, 1),
        intents: int = DEFAULT_INTENTS,
        timings: GatewayTimings | None = None,
        rng: random.Random | None = None,
        os_name: str = sys.platform,
        library: str = "picortex",
        pacer: IdentifyPacer | None = None,
    ) -> None:
        self._token = token
        self._shard = shard
        self._intents = intents
        self._t = timings or GatewayTimings()
        self._rng = rng or random.Random()
        self._properties = {"os": os_name, "browser": library, "device": library}
        # Shared by the shards of one process: they draw on the same session start limit.
        self.pacer = pacer or IdentifyPacer(window=self._t.identify_window)

        # Session state: survives connections.
        self.state = GatewayState.DISCONNECTED
        self.session_id: str | None = None
        self.resume_gateway_url: str | None = None
        self.seq: int | None = None
        self._intent_resume = False
        self._resume_failures = 0
        self._failures = 0
        self.reconnects = 0
        self.last_close_code: int | None = None
        self.heartbeat_latency: float | None = None
        # Set when we close a socket ourselves: (resume, reason, delay or None for backoff).
        self._plan: tuple[bool, str, float | None] | None = None
        self._stopping = False

        # Connection state: reset by `connected()`.
        self.heartbeat_interval: float | None = None
        self._next_beat: float | None = None
        self._awaiting_ack = False
        self._beat_sent_at: float | None = None
        self._hello_deadline: float | None = None
        self._sent: deque[float] = deque()
        self._live = False  # READY or RESUMED seen on this connection
        self._acked_while_live = False
        self._replayed = 0

        self._handlers: dict[int, Callable[[Any, float], list[Action]]] = {
            OP_HEARTBEAT: self._on_heartbeat_request,
            OP_RECONNECT: self._on_reconnect,
            OP_INVALID_SESSION: self._on_invalid_session,
            OP_HELLO: self._on_hello,
            OP_HEARTBEAT_ACK: self._on_heartbeat_ack,
        }

    # -- read-only views -------------------------------------------------------------------

    @property
    def shard(self) -> tuple[int, int]:
        """The `[shard_id, num_shards]` sent in IDENTIFY."""
        return self._shard

    @property
    def will_resume(self) -> bool:
        """True when the next connection will RESUME (so should go to the resume URL)."""
        return self._intent_resume and self._can_resume()

    def status(self) -> GatewayStatus:
        """A snapshot for `picortex status`."""
        latency = self.heartbeat_latency
        return GatewayStatus(
            state=self.state.value,
            session_id=self.session_id,
            seq=self.seq,
            heartbeat_latency_ms=None if latency is None else round(latency * 1000.0, 3),
            resume_gateway_url=self.resume_gateway_url,
            reconnects=self.reconnects,
            last_close_code=self.last_close_code,
            shard=self._shard,
        )

    def next_deadline(self) -> float | None:
        """When `tick()` next has something to do (None: nothing scheduled)."""
        state = self.state
        if state is GatewayState.WAITING_HELLO:
            return self._hello_deadline
        if state not in _LIVE_STATES:
            return None
        return self._next_beat

    def identify_delay(self, now: float) -> float:
        """Seconds to wait before connecting when the next connection will IDENTIFY."""
        return 0.0 if self.will_resume else self.pacer.delay(now, self._shard[0])

    def set_session_start_limit(self, limit: object, now: float) -> list[Action]:
        """Take `session_start_limit` from GET /gateway/bot."""
        report = self.pacer.update(limit, now)
        return [report] if report is not None else []

    def restore_session(self, session_id: str, resume_gateway_url: str, seq: int) -> None:
        """Take up a session persisted by an earlier process: the next connection RESUMEs it.

        Discord replays what came after `seq`; if the session is gone it answers op 9 and we
        IDENTIFY afresh, as for any failed resume.
        """
        if not session_id or not resume_gateway_url or seq < 0:
            return
        self.session_id = session_id
        self.resume_gateway_url = resume_gateway_url
        self.seq = seq
        self._intent_resume = True

    # -- events ----------------------------------------------------------------------------

    def connected(self, now: float) -> list[Action]:
        """A new socket is open; HELLO is expected next."""
        if self.state is GatewayState.FATAL:
            return []
        self.state = GatewayState.WAITING_HELLO
        self._plan = None
        self._stopping = False
        self.heartbeat_interval = None
        self._next_beat = None
        self._awaiting_ack = False
        self._beat_sent_at = None
        self._hello_deadline = now + self._t.hello_timeout
        self._sent.clear()
        self._live = False
        self._acked_while_live = False
        self._replayed = 0
        return []

    def received(self, payload: object, now: float) -> list[Action]:
        """One frame arrived: text or bytes of JSON, or an already parsed object."""
        state = self.state
        if state is GatewayState.CLOSING or state is GatewayState.FATAL:
            return []  # we already decided to leave this connection
        if isinstance(payload, _RAW_TYPES):
            try:
                frame = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return [Report("frame is not valid JSON", _excerpt(payload))]
        else:
            frame = payload
        if type(frame) is not dict:
            return [Report("frame is not a JSON object", _excerpt(frame))]
        if state is GatewayState.DISCONNECTED:
            return [Report("frame received while disconnected", _excerpt(frame))]
        op = frame.get("op")
        if op == OP_DISPATCH and type(op) is int:
            return self._on_dispatch(frame, now)
        if not _is_int(op):
            return [Report("frame has no integer op", _excerpt(frame))]
        handler = self._handlers.get(op)
        if handler is None:
            return [Report(f"unexpected opcode {op}", _excerpt(frame))]
        return handler(frame.get("d"), now)

    def closed(self, code: int | None, now: float, reason: str = "") -> list[Action]:
        """The connection ended (or never opened): decide what happens next.

        Args:
            code: the close code, or None when there was no close frame (a dropped socket or
                a failed connect).
            now: the current time.
            reason: a short description of the failure for the log, when there is one.
        """
        if self.state is GatewayState.FATAL:
            return []
        was_resume_attempt = self.will_resume and not self._live
        healthy = self._live and self._acked_while_live
        plan, self._plan = self._plan, None
        self.state = GatewayState.DISCONNECTED
        self.heartbeat_interval = None
        self._next_beat = None
        self._hello_deadline = None
        self._live = False
        self.last_close_code = code
        out: list[Action] = [
            Notify("close", {"code": code, "by": "us" if plan else "peer", "reason": reason})
        ]
        if self._stopping:
            return out
        self._failures = 0 if healthy else self._failures + 1
        if plan is not None:
            resume, why, delay = plan
        else:
            rule = CLOSE_RULES.get(code) if code is not None else None
            if rule is not None and rule.fatal:
                assert code is not None
                self.state = GatewayState.FATAL
                return [*out, Fatal(code, fatal_message(code))]
            delay = None
            if rule is not None and not rule.resume:
                self._forget_session()
                resume, why = False, f"closed with {code} ({rule.name})"
            elif rule is not None:
                resume, why = True, f"closed with {code} ({rule.name})"
            elif code is not None:
                resume, why = True, f"closed with {code}"
            else:
                resume, why = True, f"connection lost{': ' + reason if reason else ''}"
        if was_resume_attempt:
            self._resume_failures += 1
            if resume and self._resume_failures >= self._t.resume_attempts:
                why = f"{why}; resume failed {self._resume_failures} times, identifying afresh"
                self._forget_session()
                resume = False
        resume = resume and self._can_resume()
        self._intent_resume = resume
        self.reconnects += 1
        out.append(Reconnect(resume, why, self._backoff() if delay is None else delay))
        return out

    def tick(self, now: float) -> list[Action]:
        """Time passed: send due heartbeats, spot zombies."""
        state = self.state
        if state is GatewayState.WAITING_HELLO:
            if self._hello_deadline is not None and now >= self._hello_deadline:
                return self._close_and_reconnect(
                    True, f"no HELLO within {self._t.hello_timeout:g} s", notify=None
                )
            return []
        if state not in _LIVE_STATES:
            return []
        out: list[Action] = []
        if self._next_beat is not None and now >= self._next_beat:
            if self._awaiting_ack:
                return self._close_and_reconnect(
                    True,
                    "zombie connection: no heartbeat ACK since the last beat",
                    notify=Notify("zombie", {"interval_s": self.heartbeat_interval}),
                )
            out.extend(self._beat(now))
            assert self.heartbeat_interval is not None
            self._next_beat += self.heartbeat_interval
            if self._next_beat <= now:
                self._next_beat = now + self.heartbeat_interval
        return out

    def transport_error(self, problem: str, now: float) -> list[Action]:
        """The byte stream broke (e.g. corrupt compressed data): drop the socket and resume."""
        if self.state in (GatewayState.DISCONNECTED, GatewayState.CLOSING, GatewayState.FATAL):
            return [Report(problem)]
        return [Report(problem), *self._close_and_reconnect(True, problem, notify=None)]

    def shutdown(self) -> list[Action]:
        """We are stopping for good: close with 1000, which ends the session on Discord's side."""
        if self.state is GatewayState.FATAL:
            return []
        self._stopping = True
        self._forget_session()
        self._intent_resume = False
        if self.state is GatewayState.DISCONNECTED:
            return []
        self.state = GatewayState.CLOSING
        self._plan = (False, "shutting down", 0.0)
        return [Close(SHUTDOWN_CLOSE_CODE, "shutting down")]

    def hand_back(self) -> list[Action]:
        """We stop serving this shard and another process RESUMEs its session: close with
        4000, which (unlike 1000) leaves the session alive on Discord's side."""
        if self.state is GatewayState.FATAL:
            return []
        self._stopping = True
        self._intent_resume = False
        if self.state is GatewayState.DISCONNECTED:
            return []
        self.state = GatewayState.CLOSING
        self._plan = (False, "handing the shard back", 0.0)
        return [Close(HAND_BACK_CLOSE_CODE, "handing the shard back")]

    # -- opcode handlers -------------------------------------------------------------------

    def _on_dispatch(self, frame: dict[str, Any], now: float) -> list[Action]:
        name = frame.get("t")
        seq = frame.get("s")
        if type(seq) is int:
            self.seq = seq
        elif seq is not None:
            return [Report("dispatch with a non-integer s", _excerpt(frame))]
        if type(name) is not str:
            return [Report("dispatch without an event name", _excerpt(frame))]
        data = frame.get("d")
        if self.state is GatewayState.RESUMING:
            if name == "RESUMED":
                return self._on_resumed(data, seq, now)
            self._replayed += 1
        elif name == "READY":
            return self._on_ready(data, seq, now)
        return [Dispatch(name, data, seq)]

    def _on_ready(self, data: Any, seq: int | None, now: float) -> list[Action]:
        out: list[Action] = []
        session_id = data.get("session_id") if isinstance(data, dict) else None
        url = data.get("resume_gateway_url") if isinstance(data, dict) else None
        guilds = data.get("guilds") if isinstance(data, dict) else None
        if type(session_id) is str and session_id:
            self.session_id = session_id
        else:
            self.session_id = None
            out.append(Report("READY without a session_id", _excerpt(data)))
        if type(url) is str and url:
            self.resume_gateway_url = url
        else:
            self.resume_gateway_url = None
            out.append(Report("READY without a resume_gateway_url", _excerpt(data)))
        self.state = GatewayState.READY
        self._live = True
        self._resume_failures = 0
        self._intent_resume = True
        out.append(
            Notify(
                "ready",
                {
                    "session_id": self.session_id,
                    "shard": list(self._shard),
                    "seq": seq,
                    # The guilds Discord routes to this shard (each comes as a GUILD_CREATE).
                    "guilds": len(guilds) if isinstance(guilds, list) else 0,
                },
            )
        )
        out.append(Dispatch("READY", data, seq))
        return out

    def _on_resumed(self, data: Any, seq: int | None, now: float) -> list[Action]:
        self.state = GatewayState.READY
        self._live = True
        self._resume_failures = 0
        out: list[Action] = [
            Notify(
                "resumed",
                {
                    "session_id": self.session_id,
                    "replayed": self._replayed,
                    "shard": list(self._shard),
                },
            ),
            Dispatch("RESUMED", data, seq),
        ]
        return out

    def _on_hello(self, data: Any, now: float) -> list[Action]:
        if self.state is not GatewayState.WAITING_HELLO:
            return [Report("HELLO received twice on one connection", _excerpt(data))]
        interval = data.get("heartbeat_interval") if isinstance(data, dict) else None
        if not _is_number(interval) or not interval > 0:
            return [
                Report("HELLO without a usable heartbeat_interval", _excerpt(data)),
                *self._close_and_reconnect(True, "malformed HELLO", notify=None),
            ]
        self.heartbeat_interval = interval / 1000.0
        self._next_beat = now + self.heartbeat_interval * self._rng.random()
        self._hello_deadline = None
        if self.will_resume:
            self.state = GatewayState.RESUMING
            payload = {
                "op": OP_RESUME,
                "d": {"token": self._token, "session_id": self.session_id, "seq": self.seq},
            }
            self._note_sent(now)
            return [
                Notify(
                    "resume",
                    {"session_id": self.session_id, "seq": self.seq, "shard": list(self._shard)},
                ),
                Send(payload, "resume"),
            ]
        self._forget_session()
        self.state = GatewayState.IDENTIFYING
        identify = {
            "op": OP_IDENTIFY,
            "d": {
                "token": self._token,
                "intents": self._intents,
                "properties": dict(self._properties),
                "compress": False,
                "shard": list(self._shard),
            },
        }
        self._note_sent(now)
        self.pacer.record(now, self._shard[0])
        return [
            Notify("identify", {"shard": list(self._shard), "intents": self._intents}),
            Send(identify, "identify"),
        ]

    def _on_heartbeat_request(self, _data: Any, now: float) -> list[Action]:
        if self.state not in _LIVE_STATES:
            return [Report("heartbeat request before HELLO")]
        out = self._beat(now)
        # Restart the interval: the server just got a beat, and the next periodic one must
        # not be judged against an ACK that is still in flight.
        if out and self.heartbeat_interval is not None:
            self._next_beat = now + self.heartbeat_interval
        return out

    def _on_heartbeat_ack(self, _data: Any, now: float) -> list[Action]:
        if not self._awaiting_ack or self._beat_sent_at is None:
            return []
        self._awaiting_ack = False
        self.heartbeat_latency = max(0.0, now - self._beat_sent_at)
        if self._live:
            self._acked_while_live = True
        return []

    def _on_reconnect(self, _data: Any, _now: float) -> list[Action]:
        return self._close_and_reconnect(
            True, "Discord asked us to reconnect (op 7)", notify=Notify("reconnect_requested")
        )

    def _on_invalid_session(self, data: Any, _now: float) -> list[Action]:
        resumable = data is True
        note = Notify("invalid_session", {"resumable": resumable})
        if resumable:
            return self._close_and_reconnect(True, "invalid session (op 9, resumable)", notify=note)
        self._forget_session()
        low, high = self._t.invalid_session_delay
        return self._close_and_reconnect(
            False,
            "invalid session (op 9, not resumable): identifying afresh",
            notify=note,
            delay=self._rng.uniform(low, high),
        )

    # -- helpers ---------------------------------------------------------------------------

    def _can_resume(self) -> bool:
        return self.session_id is not None and self.seq is not None

    def _forget_session(self) -> None:
        self.session_id = None
        self.resume_gateway_url = None
        self.seq = None

    def _backoff(self) -> float:
        exponent = max(0, self._failures - 1)
        ceiling = min(self._t.backoff_cap, self._t.backoff_base * (2.0 ** min(exponent, 32)))
        return ceiling * self._rng.uniform(0.5, 1.0)

    def _close_and_reconnect(
        self,
        resume: bool,
        reason: str,
        *,
        notify: Notify | None,
        delay: float | None = None,
    ) -> list[Action]:
        """Close this socket ourselves (never with 1000/1001) and plan the next connection."""
        self.state = GatewayState.CLOSING
        self._plan = (resume, reason, delay)
        out: list[Action] = [] if notify is None else [notify]
        out.append(Close(RESUME_CLOSE_CODE, reason[:120]))
        return out

    def _note_sent(self, now: float) -> None:
        self._sent.append(now)

    def _prune(self, now: float) -> None:
        # `sent + window <= now`, never `sent <= now - window`: a slot frees exactly when its
        # window has passed, whatever the float rounding of `now - window`.
        window = self._t.send_window
        sent = self._sent
        while sent and sent[0] + window <= now:
            sent.popleft()

    def _beat(self, now: float) -> list[Action]:
        self._prune(now)
        if len(self._sent) >= self._t.send_limit:
            return [Report("heartbeat skipped: the gateway send limit is reached")]
        self._note_sent(now)
        self._awaiting_ack = True
        self._beat_sent_at = now
        return [Send({"op": OP_HEARTBEAT, "d": self.seq}, "heartbeat")]
