"""The sans-IO gateway protocol against a scripted Discord peer: no sockets, no clock."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picortex.discord.protocol import (
    CLOSE_RULES,
    DEFAULT_INTENTS,
    FATAL_CLOSE_CODES,
    RESUME_CLOSE_CODE,
    Action,
    Close,
    Dispatch,
    Fatal,
    GatewayProtocol,
    GatewayState,
    GatewayTimings,
    IdentifyPacer,
    Notify,
    Reconnect,
    Report,
    Send,
    fatal_message,
)

TOKEN = "test-token-value"
INTERVAL_MS = 40_000
INTERVAL = INTERVAL_MS / 1000


class FixedRandom(random.Random):
    """A Random whose draws are pinned, so jitter is predictable."""

    def __init__(self, value: float = 0.25) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.value


class FakeDiscord:
    """A scripted gateway peer: it answers IDENTIFY, RESUME and heartbeats like Discord."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []  # every dispatch of the session, for replay
        self.session = 0
        self.session_id: str | None = None
        self.ack = True
        self.accept_resume = True
        self.received: list[dict[str, Any]] = []

    def hello(self) -> dict[str, Any]:
        return {"op": 10, "d": {"heartbeat_interval": INTERVAL_MS}, "s": None, "t": None}

    def dispatch(self, name: str, data: object) -> dict[str, Any]:
        frame = {"op": 0, "t": name, "s": len(self.history) + 1, "d": data}
        self.history.append(frame)
        return frame

    def handle(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        self.received.append(payload)
        op = payload["op"]
        if op == 1:
            return [{"op": 11}] if self.ack else []
        if op == 2:
            self.session += 1
            self.session_id = f"session-{self.session}"
            self.history = []
            ready = {
                "v": 10,
                "session_id": self.session_id,
                "resume_gateway_url": f"wss://resume-{self.session}.test",
                "user": {"id": "1", "username": "bot"},
                "guilds": [],
            }
            return [self.dispatch("READY", ready)]
        if op == 6:
            d = payload["d"]
            if not self.accept_resume or d["session_id"] != self.session_id:
                return [{"op": 9, "d": False}]
            replay = [f for f in self.history if f["s"] > d["seq"]]
            return [*replay, self.dispatch("RESUMED", None)]
        return []


class Harness:
    """Wires a GatewayProtocol to a FakeDiscord and a virtual clock."""

    def __init__(
        self,
        *,
        timings: GatewayTimings | None = None,
        rng: random.Random | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        self.proto = GatewayProtocol(
            TOKEN, shard=shard, timings=timings, rng=rng or FixedRandom(), os_name="linux"
        )
        self.peer = FakeDiscord()
        self.now = 0.0
        self.actions: list[Action] = []
        self.sends: list[tuple[float, Send]] = []
        self.dispatches: list[Dispatch] = []
        self.open = False

    def feed(self, actions: list[Action]) -> None:
        queue = deque(actions)
        while queue:
            action = queue.popleft()
            self.actions.append(action)
            if isinstance(action, Send):
                self.sends.append((self.now, action))
                if self.open:
                    for frame in self.peer.handle(action.payload):
                        queue.extend(self.proto.received(orjson.dumps(frame), self.now))
            elif isinstance(action, Dispatch):
                self.dispatches.append(action)
            elif isinstance(action, Close):
                self.open = False

    def connect(self) -> None:
        self.open = True
        self.feed(self.proto.connected(self.now))
        self.deliver(self.peer.hello())

    def deliver(self, frame: object) -> list[Action]:
        data = frame if isinstance(frame, str | bytes) else orjson.dumps(frame)
        actions = self.proto.received(data, self.now)
        self.feed(actions)
        return actions

    def close(self, code: int | None) -> list[Action]:
        self.open = False
        actions = self.proto.closed(code, self.now)
        self.feed(actions)
        return actions

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while True:
            deadline = self.proto.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.feed(self.proto.tick(self.now))
        self.now = target
        self.feed(self.proto.tick(self.now))

    def of(self, kind: type[Any]) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]

    def sent_kinds(self) -> list[str]:
        return [s.kind for _, s in self.sends]


def ready_harness(**kwargs: Any) -> Harness:
    h = Harness(**kwargs)
    h.connect()
    assert h.proto.state is GatewayState.READY
    return h


# -- handshake ------------------------------------------------------------------------------


def test_identify_payload_carries_token_intents_properties_shard_and_no_payload_compression() -> (
    None
):
    h = Harness(shard=(2, 5))
    h.connect()
    identify = h.peer.received[0]
    assert identify["op"] == 2
    d = identify["d"]
    assert d["token"] == TOKEN
    assert d["intents"] == DEFAULT_INTENTS == (1 | 1 << 9 | 1 << 10 | 1 << 12 | 1 << 13 | 1 << 15)
    assert d["properties"] == {"os": "linux", "browser": "picortex", "device": "picortex"}
    assert d["compress"] is False
    assert d["shard"] == [2, 5]
    notes = [a for a in h.of(Notify) if a.action == "identify"]
    assert notes and notes[0].fields["shard"] == [2, 5]


def test_ready_keeps_session_id_resume_url_and_seq() -> None:
    h = ready_harness()
    assert h.proto.session_id == "session-1"
    assert h.proto.resume_gateway_url == "wss://resume-1.test"
    assert h.proto.seq == 1
    assert [d.name for d in h.dispatches] == ["READY"]
    status = h.proto.status()
    assert status.state == "ready"
    assert status.session_id == "session-1"
    assert status.seq == 1
    assert status.shard == (0, 1)
    ready_notes = [a for a in h.of(Notify) if a.action == "ready"]
    assert ready_notes[0].fields["session_id"] == "session-1"


def test_send_repr_never_shows_the_token() -> None:
    h = ready_harness()
    assert all(TOKEN not in repr(a) for a in h.actions)


def test_first_heartbeat_waits_a_random_fraction_of_the_interval_then_every_interval() -> None:
    h = Harness(rng=FixedRandom(0.25))
    h.connect()
    assert h.proto.heartbeat_interval == INTERVAL
    h.advance(INTERVAL * 3)
    beats = [t for t, s in h.sends if s.kind == "heartbeat"]
    assert beats == [INTERVAL * 0.25, INTERVAL * 1.25, INTERVAL * 2.25]


def test_heartbeat_carries_last_seq_and_ack_sets_latency() -> None:
    h = ready_harness(rng=FixedRandom(0.5))
    h.deliver(h.peer.dispatch("MESSAGE_CREATE", {"id": "7"}))
    h.advance(INTERVAL)
    beat = next(s for _, s in h.sends if s.kind == "heartbeat")
    assert beat.payload == {"op": 1, "d": 2}
    assert h.proto.status().heartbeat_latency_ms == 0.0


def test_heartbeat_before_any_dispatch_sends_null() -> None:
    h = Harness(rng=FixedRandom(0.0))
    h.proto.connected(0.0)
    h.proto.received(orjson.dumps(h.peer.hello()), 0.0)
    actions = h.proto.tick(0.0)
    sends = [a for a in actions if isinstance(a, Send)]
    assert sends[0].payload == {"op": 1, "d": None}


def test_server_heartbeat_request_is_answered_at_once_and_restarts_the_interval() -> None:
    h = ready_harness(rng=FixedRandom(0.5))
    h.advance(1.0)
    before = len(h.sends)
    h.deliver({"op": 1, "d": None})
    assert h.sends[before][1].kind == "heartbeat"
    assert h.sends[before][0] == 1.0
    assert h.proto.next_deadline() == 1.0 + INTERVAL


def test_latency_measures_beat_to_ack() -> None:
    h = ready_harness(rng=FixedRandom(0.5))
    h.peer.ack = False
    h.advance(INTERVAL * 0.5)
    h.now += 0.125
    h.deliver({"op": 11})
    assert h.proto.status().heartbeat_latency_ms == 125.0


# -- zombie --------------------------------------------------------------------------------


def test_missing_ack_is_a_zombie_closed_with_a_resume_code_then_resumed() -> None:
    h = ready_harness(rng=FixedRandom(0.5))
    h.peer.ack = False
    h.advance(INTERVAL * 2)
    closes = h.of(Close)
    assert len(closes) == 1
    assert closes[0].code == RESUME_CLOSE_CODE
    assert closes[0].code not in (1000, 1001)
    assert any(a.action == "zombie" for a in h.of(Notify))
    assert h.proto.state is GatewayState.CLOSING
    # Frames after our close decision are ignored.
    assert h.proto.received(b'{"op":0,"t":"X","s":99,"d":null}', h.now) == []
    decision = h.close(RESUME_CLOSE_CODE)
    reconnect = [a for a in decision if isinstance(a, Reconnect)]
    assert reconnect and reconnect[0].resume is True
    assert "zombie" in reconnect[0].reason
    assert h.proto.will_resume
    h.peer.ack = True
    h.connect()
    resume = h.peer.received[-2] if h.peer.received[-1]["op"] == 1 else h.peer.received[-1]
    assert resume == {
        "op": 6,
        "d": {"token": TOKEN, "session_id": "session-1", "seq": 1},
    }
    assert h.proto.status().state == "ready"


def test_an_acked_beat_is_not_a_zombie() -> None:
    h = ready_harness()
    h.advance(INTERVAL * 10)
    assert h.of(Close) == []
    assert h.sent_kinds().count("heartbeat") == 10


# -- resume and replay ------------------------------------------------------------------------


def test_resume_replays_missed_events_once_in_order() -> None:
    h = ready_harness()
    h.deliver(h.peer.dispatch("MESSAGE_CREATE", {"id": "1"}))
    h.close(None)  # network drop, no close frame
    missed = [h.peer.dispatch("MESSAGE_CREATE", {"id": str(i)}) for i in (2, 3, 4)]
    assert missed[-1]["s"] == 5
    h.connect()
    names = [(d.name, d.data and d.data.get("id")) for d in h.dispatches]
    assert names == [
        ("READY", None),
        ("MESSAGE_CREATE", "1"),
        ("MESSAGE_CREATE", "2"),
        ("MESSAGE_CREATE", "3"),
        ("MESSAGE_CREATE", "4"),
        ("RESUMED", None),
    ]
    resumed = [a for a in h.of(Notify) if a.action == "resumed"]
    assert resumed[0].fields["replayed"] == 3
    assert h.proto.seq == 6
    assert h.proto.state is GatewayState.READY


def test_op7_reconnect_closes_and_resumes() -> None:
    h = ready_harness()
    h.deliver({"op": 7, "d": None})
    close = h.of(Close)[-1]
    assert close.code == RESUME_CLOSE_CODE
    decision = h.close(close.code)
    assert [a.resume for a in decision if isinstance(a, Reconnect)] == [True]
    h.connect()
    assert h.peer.received[-1]["op"] == 6 or h.peer.received[-2]["op"] == 6
    assert h.proto.state is GatewayState.READY
    assert h.proto.session_id == "session-1"


def test_op9_resumable_resumes() -> None:
    h = ready_harness()
    h.deliver({"op": 9, "d": True})
    assert any(a.action == "invalid_session" and a.fields["resumable"] for a in h.of(Notify))
    decision = h.close(h.of(Close)[-1].code)
    assert [a.resume for a in decision if isinstance(a, Reconnect)] == [True]


def test_op9_not_resumable_identifies_afresh_after_one_to_five_seconds() -> None:
    for draw in (0.0, 1.0):
        h = ready_harness(rng=FixedRandom(draw))
        h.deliver({"op": 9, "d": False})
        assert h.proto.session_id is None and h.proto.seq is None
        decision = h.close(h.of(Close)[-1].code)
        rec = next(a for a in decision if isinstance(a, Reconnect))
        assert rec.resume is False
        assert 1.0 <= rec.delay <= 5.0
        h.connect()
        assert h.peer.received[-1]["op"] == 2 or h.peer.received[-2]["op"] == 2
        assert h.proto.session_id == "session-2"


def test_op9_in_answer_to_resume_falls_back_to_identify() -> None:
    h = ready_harness()
    h.close(None)
    h.peer.accept_resume = False
    h.connect()
    h.close(h.of(Close)[-1].code)
    h.peer.accept_resume = True
    h.connect()
    assert h.proto.session_id == "session-2"
    assert [d.name for d in h.dispatches].count("READY") == 2


# -- close codes ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(FATAL_CLOSE_CODES))
def test_fatal_close_codes_stop_with_a_sentence(code: int) -> None:
    h = ready_harness()
    actions = h.close(code)
    fatal = [a for a in actions if isinstance(a, Fatal)]
    assert len(fatal) == 1
    assert fatal[0].code == code
    assert str(code) in fatal[0].reason
    assert CLOSE_RULES[code].name in fatal[0].reason
    assert not any(isinstance(a, Reconnect) for a in actions)
    assert h.proto.state is GatewayState.FATAL
    assert h.proto.connected(h.now) == []
    assert h.proto.closed(4000, h.now) == []
    assert h.proto.received(b'{"op":11}', h.now) == []


def test_fatal_codes_are_exactly_the_spec_list() -> None:
    assert {4004, 4010, 4011, 4012, 4013, 4014} == FATAL_CLOSE_CODES


def test_fatal_messages_say_which_and_why() -> None:
    assert "4004" in fatal_message(4004) and "token" in fatal_message(4004)
    assert "Message Content" in fatal_message(4014)
    assert "--shard" in fatal_message(4010)
    assert fatal_message(4000) == "Discord closed the gateway with code 4000."


@pytest.mark.parametrize("code", [4001, 4003, 4005, 4007, 4009])
def test_session_ending_codes_identify_afresh(code: int) -> None:
    h = ready_harness()
    actions = h.close(code)
    rec = next(a for a in actions if isinstance(a, Reconnect))
    assert rec.resume is False
    assert str(code) in rec.reason
    assert h.proto.session_id is None
    h.connect()
    assert h.proto.session_id == "session-2"


@pytest.mark.parametrize("code", [None, 1000, 1001, 1006, 1011, 4000, 4002, 4008, 4999])
def test_other_closes_resume(code: int | None) -> None:
    h = ready_harness()
    actions = h.close(code)
    rec = next(a for a in actions if isinstance(a, Reconnect))
    assert rec.resume is True
    note = next(a for a in actions if isinstance(a, Notify))
    assert note.action == "close" and note.fields["code"] == code
    assert h.proto.status().last_close_code == code
    assert h.proto.status().reconnects == 1


def test_close_before_ready_identifies_again() -> None:
    h = Harness()
    h.proto.connected(0.0)
    actions = h.proto.closed(None, 0.0, "refused")
    rec = next(a for a in actions if isinstance(a, Reconnect))
    assert rec.resume is False
    assert "refused" in rec.reason


# -- backoff and the resume-URL fallback ----------------------------------------------------


def test_backoff_grows_exponentially_with_jitter_and_caps() -> None:
    timings = GatewayTimings(backoff_base=1.0, backoff_cap=16.0)
    rng = random.Random(7)
    h = Harness(timings=timings, rng=rng)
    delays = []
    for _ in range(8):
        h.proto.connected(h.now)
        rec = next(a for a in h.proto.closed(None, h.now) if isinstance(a, Reconnect))
        delays.append(rec.delay)
    ceilings = [1, 2, 4, 8, 16, 16, 16, 16]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling * 0.5 <= delay <= ceiling
    assert len(set(delays)) > 1


def test_backoff_resets_after_a_healthy_connection() -> None:
    h = Harness(timings=GatewayTimings(backoff_base=1.0, backoff_cap=64.0), rng=FixedRandom(1.0))
    for _ in range(5):
        h.proto.connected(h.now)
        h.proto.closed(None, h.now)
    h.connect()  # READY
    h.advance(INTERVAL)  # an ACKed beat: healthy
    rec = next(a for a in h.close(None) if isinstance(a, Reconnect))
    assert rec.delay == 1.0
    # READY without any ACK is not healthy yet: the next failure backs off further.
    h.connect()
    rec2 = next(a for a in h.close(None) if isinstance(a, Reconnect))
    assert rec2.delay == 1.0
    h.proto.connected(h.now)
    rec3 = next(a for a in h.proto.closed(None, h.now) if isinstance(a, Reconnect))
    assert rec3.delay == 2.0


def test_a_resume_url_that_keeps_failing_falls_back_to_identify() -> None:
    h = ready_harness(timings=GatewayTimings(resume_attempts=3))
    h.close(None)
    decisions = []
    for _ in range(3):
        assert h.proto.will_resume
        # the connect to the resume URL fails
        decisions.append(next(a for a in h.proto.closed(None, h.now) if isinstance(a, Reconnect)))
    assert [d.resume for d in decisions] == [True, True, False]
    assert "identifying afresh" in decisions[-1].reason
    assert not h.proto.will_resume
    h.connect()
    assert h.proto.session_id == "session-2"


def test_a_successful_resume_resets_the_failure_count() -> None:
    h = ready_harness(timings=GatewayTimings(resume_attempts=2))
    h.close(None)
    h.proto.closed(None, h.now)  # one failed resume
    h.connect()  # resumed
    h.close(None)
    rec = next(a for a in h.proto.closed(None, h.now) if isinstance(a, Reconnect))
    assert rec.resume is True


def test_no_hello_in_time_closes_and_reconnects() -> None:
    h = Harness(timings=GatewayTimings(hello_timeout=5.0))
    h.feed(h.proto.connected(0.0))
    h.open = True
    h.advance(4.9)
    assert h.of(Close) == []
    h.advance(0.2)
    assert h.of(Close)[0].code == RESUME_CLOSE_CODE
    rec = next(a for a in h.close(RESUME_CLOSE_CODE) if isinstance(a, Reconnect))
    assert "HELLO" in rec.reason


# -- send limit -------------------------------------------------------------------------------


def _max_in_window(times: list[float], window: float) -> int:
    best = 0
    start = 0
    for end, t in enumerate(times):
        while times[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_server_heartbeat_requests_cannot_push_us_over_the_limit() -> None:
    h = ready_harness()
    for _ in range(300):
        h.deliver({"op": 1, "d": None})
    times = [t for t, _ in h.sends]
    assert _max_in_window(times, 60.0) <= 120
    assert any("send limit" in r.problem for r in h.of(Report))


# -- identify pacing ------------------------------------------------------------------------


def test_pacer_spaces_identifies_per_max_concurrency_bucket() -> None:
    pacer = IdentifyPacer(window=5.0)
    pacer.update({"total": 1000, "remaining": 999, "reset_after": 10**7, "max_concurrency": 2}, 0)
    assert pacer.delay(0.0, 0) == 0.0
    pacer.record(0.0, 0)
    # Shard 1 is in the other bucket: it identifies at once.
    assert pacer.delay(0.0, 1) == 0.0
    pacer.record(1.0, 1)
    # Shard 2 shares bucket 0 with shard 0; shard 0 itself waits too.
    assert pacer.delay(1.0, 2) == 4.0
    assert pacer.delay(1.0, 0) == 4.0
    assert pacer.delay(2.0, 3) == 4.0
    assert pacer.delay(5.0, 2) == 0.0
    assert pacer.remaining == 997


def test_by_default_identifies_of_a_bucket_are_more_than_discords_5_s_apart() -> None:
    # Two IDENTIFYs sent exactly 5 s apart may arrive closer after network jitter: op 9.
    for pacer in (IdentifyPacer(), IdentifyPacer(window=GatewayTimings().identify_window)):
        pacer.record(0.0, 0)
        assert 5.0 < pacer.delay(0.0, 0) <= 5.5


def test_a_new_max_concurrency_keeps_every_bucket_waiting() -> None:
    pacer = IdentifyPacer(window=5.0)
    pacer.record(0.0, 0)
    pacer.update({"max_concurrency": 4}, 1.0)
    assert [pacer.delay(1.0, s) for s in range(4)] == [4.0, 4.0, 4.0, 4.0]


def test_pacer_waits_for_reset_when_no_session_starts_remain() -> None:
    pacer = IdentifyPacer()
    pacer.update({"total": 1000, "remaining": 0, "reset_after": 60_000, "max_concurrency": 1}, 10)
    assert pacer.delay(10.0) == 60.0
    assert pacer.delay(70.0) == 0.0
    pacer.record(70.0)
    assert pacer.remaining == 999


def test_protocol_applies_the_session_start_limit_only_to_identify() -> None:
    h = ready_harness()
    h.proto.set_session_start_limit(
        {"total": 5, "remaining": 0, "reset_after": 30_000, "max_concurrency": 1}, h.now
    )
    h.close(None)
    assert h.proto.will_resume
    assert h.proto.identify_delay(h.now) == 0.0
    h.close(4007)
    assert h.proto.identify_delay(h.now) == 30.0
    bad = h.proto.set_session_start_limit("nope", h.now)
    assert isinstance(bad[0], Report)


# -- shutdown and transport errors ------------------------------------------------------------


def test_shutdown_closes_with_1000_and_does_not_reconnect() -> None:
    h = ready_harness()
    actions = h.proto.shutdown()
    assert actions == [Close(1000, "shutting down")]
    after = h.proto.closed(1000, h.now)
    assert not any(isinstance(a, Reconnect) for a in after)
    assert h.proto.session_id is None
    assert Harness().proto.shutdown() == []


def test_hand_back_closes_with_4000_keeping_the_session_for_the_next_holder() -> None:
    h = ready_harness()
    session_id, seq = h.proto.session_id, h.proto.seq
    assert h.proto.hand_back() == [Close(4000, "handing the shard back")]
    after = h.proto.closed(4000, h.now)
    assert not any(isinstance(a, Reconnect) for a in after)  # another process takes it on
    assert session_id is not None and (h.proto.session_id, h.proto.seq) == (session_id, seq)
    assert Harness().proto.hand_back() == []


def test_transport_error_reports_closes_and_resumes() -> None:
    h = ready_harness()
    actions = h.proto.transport_error("corrupt zlib stream", h.now)
    assert isinstance(actions[0], Report)
    assert any(isinstance(a, Close) and a.code == RESUME_CLOSE_CODE for a in actions)
    rec = next(a for a in h.proto.closed(RESUME_CLOSE_CODE, h.now) if isinstance(a, Reconnect))
    assert rec.resume is True
    assert h.proto.transport_error("late", h.now) == [Report("late")]


# -- junk -------------------------------------------------------------------------------------

JUNK: list[tuple[object, str]] = [
    (b"\xff\xfe not json", "not valid JSON"),
    ("[1, 2, 3]", "not a JSON object"),
    ('"text"', "not a JSON object"),
    ("{}", "no integer op"),
    ('{"op": "0"}', "no integer op"),
    ('{"op": true}', "no integer op"),
    ('{"op": 1.5}', "no integer op"),
    ('{"op": 42}', "unexpected opcode 42"),
    ('{"op": 2, "d": {}}', "unexpected opcode 2"),
    ('{"op": 0, "s": 5, "d": {}}', "without an event name"),
    ('{"op": 0, "t": "X", "s": "5", "d": {}}', "non-integer s"),
    ('{"op": 10, "d": {"heartbeat_interval": 1}}', "HELLO received twice"),
    (12345, "not a JSON object"),
]


@pytest.mark.parametrize(("frame", "problem"), JUNK)
def test_junk_frames_are_reported_never_raised(frame: object, problem: str) -> None:
    h = ready_harness()
    before = h.proto.status()
    actions = h.proto.received(frame, h.now)
    reports = [a for a in actions if isinstance(a, Report)]
    assert reports, actions
    assert problem in reports[0].problem
    assert not any(isinstance(a, Dispatch) for a in actions)
    assert h.proto.status().session_id == before.session_id


def test_dispatch_without_t_still_advances_seq() -> None:
    h = ready_harness()
    h.proto.received('{"op": 0, "s": 9, "d": {}}', h.now)
    assert h.proto.seq == 9


def test_malformed_hello_closes_and_reconnects() -> None:
    h = Harness()
    h.proto.connected(0.0)
    actions = h.proto.received('{"op": 10, "d": {"heartbeat_interval": -5}}', 0.0)
    assert isinstance(actions[0], Report)
    assert any(isinstance(a, Close) for a in actions)


def test_ready_without_session_fields_is_reported_and_still_dispatched() -> None:
    h = Harness()
    h.proto.connected(0.0)
    h.proto.received(orjson.dumps(h.peer.hello()), 0.0)
    actions = h.proto.received('{"op":0,"t":"READY","s":1,"d":{}}', 0.0)
    problems = [a.problem for a in actions if isinstance(a, Report)]
    assert any("session_id" in p for p in problems)
    assert any("resume_gateway_url" in p for p in problems)
    assert any(isinstance(a, Dispatch) and a.name == "READY" for a in actions)
    assert not h.proto.will_resume


def test_frames_while_disconnected_are_reported() -> None:
    proto = GatewayProtocol(TOKEN)
    actions = proto.received('{"op": 11}', 0.0)
    assert isinstance(actions[0], Report)


def test_parsed_dict_payloads_are_accepted() -> None:
    h = ready_harness()
    actions = h.proto.received({"op": 0, "t": "TYPING_START", "s": 2, "d": {}}, h.now)
    assert actions == [Dispatch("TYPING_START", {}, 2)]


def test_heartbeat_request_before_hello_and_stray_ack_are_harmless() -> None:
    proto = GatewayProtocol(TOKEN)
    proto.connected(0.0)
    assert isinstance(proto.received('{"op": 1}', 0.0)[0], Report)
    assert proto.received('{"op": 11}', 0.0) == []


# -- hypothesis: arbitrary event sequences --------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
frames = st.one_of(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from([0, 1, 7, 9, 10, 11, 2, 99]) | json_leaf,
            "d": json_value,
            "s": st.none() | st.integers(0, 1000) | json_leaf,
            "t": st.none() | st.sampled_from(["READY", "RESUMED", "MESSAGE_CREATE"]) | json_leaf,
        }
    ),
    json_value,
)
raw = st.binary(max_size=40) | st.text(max_size=40)
events = st.lists(
    st.one_of(
        st.tuples(st.just("connected")),
        st.tuples(st.just("frame"), frames),
        st.tuples(st.just("raw"), raw),
        st.tuples(
            st.just("closed"),
            st.none() | st.sampled_from(sorted(CLOSE_RULES)) | st.integers(1000, 4999),
        ),
        st.tuples(st.just("tick"), st.floats(0, 200)),
        st.tuples(st.just("hello"), st.integers(1, 60_000)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_any_event_sequence_never_raises_and_keeps_the_invariants(
    seq: list[tuple[Any, ...]],
) -> None:
    proto = GatewayProtocol(TOKEN, rng=random.Random(1))
    now = 0.0
    sends: list[float] = []
    fatal = False
    for event in seq:
        kind = event[0]
        if kind == "connected":
            actions = proto.connected(now)
            sends_this_conn: list[float] = []
            sends = sends_this_conn
        elif kind == "frame":
            actions = proto.received(orjson.dumps(event[1]), now)
        elif kind == "raw":
            listening = proto.state not in (GatewayState.CLOSING, GatewayState.FATAL)
            actions = proto.received(event[1], now)
            try:
                parsed = orjson.loads(event[1])
            except orjson.JSONDecodeError:
                parsed = None
                junk = True
            else:
                junk = not isinstance(parsed, dict)
            if junk and listening:
                assert any(isinstance(a, Report) for a in actions)
        elif kind == "closed":
            actions = proto.closed(event[1], now)
        elif kind == "tick":
            now += event[1]
            actions = proto.tick(now)
            deadline = proto.next_deadline()
            assert deadline is None or deadline > now, "a tick must move the deadline on"
        else:
            hello = {"op": 10, "d": {"heartbeat_interval": event[1]}}
            actions = proto.received(orjson.dumps(hello), now)
        for action in actions:
            assert not fatal or isinstance(action, Notify), "nothing happens after Fatal"
            if isinstance(action, Send):
                sends.append(now)
                assert TOKEN not in repr(action)
            if isinstance(action, Close):
                assert action.code not in (1000, 1001)
            if isinstance(action, Reconnect):
                assert action.delay >= 0
            if isinstance(action, Fatal):
                fatal = True
        assert _max_in_window(sends, 60.0) <= 120 if sends else True
        status = proto.status()
        assert status.state in {s.value for s in GatewayState}
