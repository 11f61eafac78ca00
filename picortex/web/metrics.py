"""`GET /metrics`: the bot's counters and gauges in Prometheus' text format.

Counters come from the action log, read incrementally from where the previous scrape stopped
(every decision, answer, model call and 429 is logged there already, so nothing on the
message path pays for metrics); gauges come from the same snapshot as `picortex status`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# One scrape reads at most this much new log; a backlog is caught up over a few scrapes.
READ_MAX_BYTES: Final = 16 * 1024 * 1024


class LogCounters:
    """Event counts from the action log since the panel started, kept up to date on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: Counter[str] = Counter()
        self.decisions: Counter[str] = Counter()
        self.replies: Counter[str] = Counter()
        self.llm_calls: Counter[tuple[str, str, str]] = Counter()
        self.llm_cost: dict[str, float] = {}
        self.rate_limited = 0
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        try:
            st = os.stat(path)
        except OSError:
            return
        self._identity = (st.st_dev, st.st_ino)
        self._offset = st.st_size

    def update(self) -> None:
        """Count the lines written since the last update (following a rotation)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity:
            rotated = self.path.with_name(self.path.name + ".1")
            try:
                old = os.stat(rotated)
                if (old.st_dev, old.st_ino) == self._identity:
                    self._read(rotated)
            except OSError:
                pass
            self._identity, self._offset, self._partial = identity, 0, b""
        elif st.st_size < self._offset:
            self._offset, self._partial = st.st_size, b""  # truncated (a torn tail repaired)
        self._read(self.path)

    def _read(self, path: Path) -> None:
        try:
            with open(path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(READ_MAX_BYTES)
        except OSError:
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for raw in lines:
            self._count(raw)

    def _count(self, raw: bytes) -> None:
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(record, dict):
            return
        event = str(record.get("event", "?"))
        self.events[event] += 1
        if event == "decision":
            self.decisions[str(record.get("outcome", "?"))] += 1
        elif event == "reply":
            self.replies[str(record.get("result", "?"))] += 1
        elif event == "llm":
            model = str(record.get("model", "?"))
            key = (model, str(record.get("stage", "?")), str(record.get("outcome", "?")))
            self.llm_calls[key] += 1
            cost = record.get("cost_usd")
            if isinstance(cost, int | float):
                self.llm_cost[model] = self.llm_cost.get(model, 0.0) + float(cost)
        elif event == "rest" and record.get("outcome") == "rate_limited":
            self.rate_limited += 1


class _BotCollector(Collector):
    def __init__(self, counters: LogCounters, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._counters = counters
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        c = self._counters
        c.update()
        events = CounterMetricFamily(
            "picortex_events", "Action-log events written, by type.", labels=["event"]
        )
        for name, count in sorted(c.events.items()):
            events.add_metric([name], count)
        yield events
        decisions = CounterMetricFamily(
            "picortex_decisions", "Attention decisions, by outcome.", labels=["outcome"]
        )
        for name, count in sorted(c.decisions.items()):
            decisions.add_metric([name], count)
        yield decisions
        answers = CounterMetricFamily(
            "picortex_replies",
            "Replies the bot posted (or failed to), by result.",
            labels=["result"],
        )
        for name, count in sorted(c.replies.items()):
            answers.add_metric([name], count)
        yield answers
        calls = CounterMetricFamily(
            "picortex_model_calls",
            "Model calls, by model, stage and outcome.",
            labels=["model", "stage", "outcome"],
        )
        for (model, stage, outcome), count in sorted(c.llm_calls.items()):
            calls.add_metric([model, stage, outcome], count)
        yield calls
        cost = CounterMetricFamily(
            "picortex_model_cost_usd", "Model spend in USD, by model.", labels=["model"]
        )
        for model, usd in sorted(c.llm_cost.items()):
            cost.add_metric([model], usd)
        yield cost
        yield CounterMetricFamily(
            "picortex_rest_rate_limited",
            "Discord REST answers of 429 (waited out and resent).",
            value=c.rate_limited,
        )
        yield from _gauges(self._snapshot())


def _gauges(snap: dict[str, Any]) -> Iterator[Metric]:
    gateway = snap.get("gateway") or {}
    latency = gateway.get("heartbeat_latency_ms")
    lat = GaugeMetricFamily(
        "picortex_gateway_heartbeat_latency_seconds", "Last gateway heartbeat round trip."
    )
    if isinstance(latency, int | float):
        lat.add_metric([], latency / 1000)
    yield lat
    yield CounterMetricFamily(
        "picortex_gateway_reconnects",
        "Gateway reconnections.",
        value=int(gateway.get("reconnects") or 0),
    )
    depth = GaugeMetricFamily(
        "picortex_mailbox_depth", "Messages queued per channel mailbox.", labels=["channel_id"]
    )
    for box in snap.get("mailboxes") or []:
        depth.add_metric([str(box.get("channel_id"))], float(box.get("depth") or 0))
    yield depth
    yield GaugeMetricFamily(
        "picortex_channel_actors",
        "Channel actors running.",
        value=float(snap.get("channel_actors") or 0),
    )
    yield CounterMetricFamily(
        "picortex_mailbox_overflows",
        "Messages refused by full mailboxes.",
        value=int(snap.get("mailbox_overflows") or 0),
    )
    restarts = CounterMetricFamily(
        "picortex_actor_restarts", "Actor restarts, by actor.", labels=["actor"]
    )
    for actor, count in sorted((snap.get("restarts") or {}).items()):
        restarts.add_metric([str(actor)], int(count))
    yield restarts
    spent = GaugeMetricFamily(
        "picortex_budget_spent_usd",
        "Spend in the current budget period, by workspace.",
        labels=["workspace"],
    )
    for workspace, row in sorted((snap.get("budget") or {}).items()):
        spent.add_metric([str(workspace)], float(row.get("spent_usd") or 0))
    yield spent


class Metrics:
    """The panel's metrics registry."""

    def __init__(self, log_path: Path, snapshot: Callable[[], dict[str, Any]]) -> None:
        self.counters = LogCounters(log_path)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BotCollector(self.counters, snapshot))

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)
