"""The web actor: serves the panel on its port; a taken port is a warning, never a crash."""

from __future__ import annotations

import socket
from pathlib import Path

import attrs
import httpx
import trio

from picortex.actors.pipeline import ChannelRegistry, SettingsSource
from picortex.actors.web import WebActor
from picortex.config import Settings, WebSettings
from picortex.core.personas import PersonaSet
from picortex.store import Store
from picortex.web.panel import Panel


@attrs.define
class Sink:
    rows: list[dict[str, object]] = attrs.field(factory=list)

    def emit(self, event: str, /, **fields: object) -> None:
        self.rows.append({"event": event, **fields})


class NoRest:
    async def create_message(self, channel_id: int, content: str, **kw: object) -> dict[str, str]:
        raise AssertionError("not used")


def make_panel(home: Path, store: Store, sink: Sink) -> Panel:
    return Panel(
        settings=SettingsSource(Settings(home=home), store),
        store=store,
        events=sink,
        home=home,
        action_log_path=home / "actions.jsonl",
        snapshot=lambda: {"gateway": {"state": "connected"}},
        registry=ChannelRegistry(),
        cache=attrs.make_class("C", {})(),  # never asked in these tests
        llm=None,
        rest=NoRest(),  # type: ignore[arg-type]
        personas=PersonaSet,
        triggers=list,
        dm_channels={},
    )


async def test_serves_the_panel_on_a_free_port(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    actor = WebActor(WebSettings(port=0), tmp_path, lambda: make_panel(tmp_path, store, sink), sink)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            assert actor.url is not None
            token = (tmp_path / "web.token").read_text().strip()
            async with httpx.AsyncClient(base_url=actor.url) as client:
                r = await client.get("/api/status", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200
                assert r.json()["gateway"]["state"] == "connected"
                assert (await client.get("/")).status_code == 303
            nursery.cancel_scope.cancel()
        assert actor.url is None
        assert [r["outcome"] for r in sink.rows if r["event"] == "web"] == ["listening"]
    finally:
        store.close()


async def test_a_taken_port_is_a_warning_not_a_crash(tmp_path: Path, caplog: object) -> None:
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    actor = WebActor(
        WebSettings(port=port), tmp_path, lambda: make_panel(tmp_path, store, sink), sink
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)  # returns: started, idle, not raising
            await trio.sleep(0)
            assert actor.url is None
            [event] = [r for r in sink.rows if r["event"] == "web"]
            assert event["outcome"] == "unavailable"
            assert event["address"] == f"127.0.0.1:{port}"
            nursery.cancel_scope.cancel()
    finally:
        blocker.close()
        store.close()
