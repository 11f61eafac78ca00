"""The panel's ASGI app through an in-process client: auth, pages, API, changes, metrics."""

from __future__ import annotations

import html
import logging
import re
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import urlencode

import attrs
import httpx
import orjson
import pytest
import trio
from starlette.routing import Route

from picortex.actors.pipeline import ChannelRegistry, SettingsSource
from picortex.config import ATTENTION_MODES, Settings, runtime_values
from picortex.core.llm import LLMRequest, LLMResult
from picortex.core.personas import PersonaSet
from picortex.core.triggerlog import TriggerEntry
from picortex.store import AdminStore, Store, StoreActor
from picortex.store.chathome import ChatHome
from picortex.types import Channel, ChannelType, Message, User
from picortex.web.app import PanelApp
from picortex.web.auth import (
    load_or_create_metrics_token,
    load_or_create_token,
    make_login_code,
)
from picortex.web.limits import MAX_UNAUTHENTICATED
from picortex.web.panel import Panel
from tests.web.forms import settings_form

OWNER = 1001
BOB = 1002
GUILD = 500
GENERAL = 600
THREAD = 601
CATEGORY = 602
DM = 700
STAGE = 603
FORUM = 604
DELAY = 2.0


@attrs.define
class Sink:
    """Collects events instead of writing them."""

    rows: list[dict[str, Any]] = attrs.field(factory=list)

    def emit(self, event: str, /, **fields: object) -> None:
        self.rows.append({"event": event, **fields})

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["event"] == event]


@attrs.define
class FakeCache:
    messages: dict[int, list[Message]] = attrs.field(factory=dict)

    def recent(self, channel_id: int, n: int) -> list[Message]:
        return self.messages.get(channel_id, [])[-n:]


@attrs.define
class FakeRest:
    posted: list[tuple[int, str, Any]] = attrs.field(factory=list)

    async def create_message(
        self,
        channel_id: int,
        content: str,
        *,
        reply_to: int | None = None,
        allowed_mentions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.posted.append((channel_id, content, allowed_mentions))
        return {"id": str(9000 + len(self.posted)), "channel_id": str(channel_id)}


@attrs.define
class FakeModel:
    """Answers "respond" for messages that mention cake, "skip" otherwise."""

    requests: list[LLMRequest] = attrs.field(factory=list)
    confidence: float | None = None  # given with each verdict when set

    async def complete(self, request: LLMRequest) -> LLMResult:
        self.requests.append(request)
        prompt = request.messages[-1].content
        new = prompt.rsplit("cake", 1)
        verdict = len(new) > 1 and "cake" in prompt.split("New message")[-1]
        answer: dict[str, object] = {
            "should_respond": verdict,
            "reason": "cake" if verdict else "no cake",
        }
        if self.confidence is not None:
            answer["confidence"] = self.confidence
        text = orjson.dumps(answer)
        return LLMResult(text.decode(), request.model or "m", 10, 5, 0.00002, 3, "ok")


def message(mid: int, channel: int, author: int, name: str, text: str) -> Message:
    return Message(
        id=mid,
        channel_id=channel,
        guild_id=GUILD,
        author=User(author, name),
        content=text,
        timestamp="2026-12-01T10:00:00+00:00",
    )


@attrs.define
class Env:
    client: httpx.AsyncClient
    app: PanelApp
    panel: Panel
    store: Store
    sink: Sink
    rest: FakeRest
    model: FakeModel
    home: Path
    token: str

    async def login(self) -> str:
        page = await self.client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        r = await self.client.post("/login", data={"token": self.token, "csrf": csrf.group(1)})
        assert r.status_code == 303
        return await self.csrf()

    async def csrf(self) -> str:
        page = await self.client.get("/chats")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        return found.group(1)

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    home = tmp_path / "home"
    home.mkdir()
    store = Store.open(home / "picortex.db")
    settings = Settings(home=home, owner_id=OWNER)
    # The panel's store as a command run outside the bot opens it; `store` seeds and checks.
    admin = AdminStore(store)
    source = SettingsSource(settings, admin)
    registry = ChannelRegistry()
    registry.add(Channel(GENERAL, ChannelType.GUILD_TEXT, GUILD, None, "general"))
    registry.add(Channel(THREAD, ChannelType.PUBLIC_THREAD, GUILD, GENERAL, "a thread"))
    registry.add(Channel(CATEGORY, ChannelType.GUILD_CATEGORY, GUILD, None, "Text Channels"))
    registry.add(Channel(STAGE, 13, GUILD, None, "stage"))
    registry.add(Channel(FORUM, ChannelType.GUILD_FORUM, GUILD, None, "ideas"))
    cache = FakeCache(
        {
            GENERAL: [
                message(11, GENERAL, BOB, "bob", "what a nice day"),
                message(12, GENERAL, BOB, "bob", "who wants cake?"),
            ]
        }
    )
    sink = Sink()
    rest = FakeRest()
    model = FakeModel()
    trigger = TriggerEntry(
        id=21,
        channel_id=DM,
        guild_id=None,
        author_id=BOB,
        author_name="bob",
        content="hi in a dm",
        timestamp="2026-12-01T10:00:00+00:00",
        trusted=True,
    )
    panel = Panel(
        settings=source,
        store=admin,
        events=sink,
        home=home,
        action_log_path=home / "actions.jsonl",
        snapshot=lambda: {
            "gateway": {
                "state": "connected",
                "heartbeat_latency_ms": 41.5,
                "reconnects": 2,
                "shard": [2, 8],
            },
            "mailboxes": [{"channel_id": str(GENERAL), "name": "general", "depth": 3}],
            "restarts": {"llm": 1},
            "budget": {},
            "channel_actors": 1,
        },
        registry=registry,
        cache=cache,
        llm=model,
        rest=rest,
        personas=PersonaSet,
        triggers=lambda: [trigger],
        dm_channels={},
    )
    token = load_or_create_token(home)
    app = PanelApp(
        panel, token, metrics_token=load_or_create_metrics_token(home), wrong_token_delay=DELAY
    )
    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://panel.test") as client:
        yield Env(client, app, panel, store, sink, rest, model, home, token)
    store.close()


def write_log(home: Path, rows: list[dict[str, Any]]) -> None:
    with open(home / "actions.jsonl", "ab") as f:
        for row in rows:
            f.write(orjson.dumps({"ts": "2026-12-01T10:00:00.000Z", **row}) + b"\n")


# ----- auth ------------------------------------------------------------------------------


async def test_token_file_is_private_and_stable(env: Env) -> None:
    path = env.home / "web.token"
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_token(env.home) == env.token
    assert len(env.token) >= 32


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/chats",
        f"/chats/{GENERAL}",
        "/activity",
        "/trust",
        "/errors",
        "/personas",
        "/send",
        "/settings",
    ],
)
async def test_pages_redirect_to_login_without_a_session(env: Env, path: str) -> None:
    r = await env.client.get(path)
    assert r.status_code == 303
    assert r.headers["location"] == "/login"


@pytest.mark.parametrize(
    "path",
    [
        "/api/status",
        "/api/chats",
        "/api/log",
        "/api/trust",
        "/api/settings",
        "/api/errors/paused",
        "/metrics",
    ],
)
async def test_api_answers_401_without_auth(env: Env, path: str) -> None:
    r = await env.client.get(path)
    assert r.status_code == 401
    assert isinstance(r.json()["error"], str)


async def test_login_page_and_static_need_no_auth(env: Env) -> None:
    assert (await env.client.get("/login")).status_code == 200
    css = await env.client.get("/static/panel.css")
    assert css.status_code == 200
    assert "body" in css.text


async def test_login_sets_a_strict_httponly_session_cookie(env: Env) -> None:
    r = await env.client.post("/login", data={"token": env.token})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"].lower()
    assert "picortex_session=" in cookie
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    page = await env.client.get("/")
    assert page.status_code == 200
    assert "connected" in page.text


async def test_wrong_token_is_answered_slowly(env: Env, autojump_clock: trio.abc.Clock) -> None:
    start = trio.current_time()
    r = await env.client.post("/login", data={"token": "guess"})
    assert r.status_code == 401
    assert trio.current_time() - start >= DELAY
    assert "picortex_session" not in r.headers.get("set-cookie", "")
    start = trio.current_time()
    r = await env.client.get("/api/chats", headers={"Authorization": "Bearer guess"})
    assert r.status_code == 401
    assert trio.current_time() - start >= DELAY


async def test_parallel_wrong_guesses_wait_in_line(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    start = trio.current_time()

    async def guess() -> None:
        await env.client.post("/login", data={"token": "guess"})

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(guess)
    assert trio.current_time() - start >= 3 * DELAY


async def test_one_time_link_logs_in_once(env: Env, autojump_clock: trio.abc.Clock) -> None:
    code = make_login_code(env.token, time.time())
    r = await env.client.get(f"/login?once={code}")
    assert r.status_code == 303
    assert "picortex_session=" in r.headers["set-cookie"]
    other = httpx.AsyncClient(transport=env.client._transport, base_url="http://panel.test")
    async with other:
        again = await other.get(f"/login?once={code}")
        assert again.status_code == 401
        assert "picortex_session=" not in again.headers.get("set-cookie", "")


async def test_a_used_link_stays_used_after_a_restart(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    code = make_login_code(env.token, time.time())
    assert (await env.client.get(f"/login?once={code}")).status_code == 303
    assert (env.home / "web.used_codes").stat().st_mode & 0o777 == 0o600
    restarted = PanelApp(env.panel, env.token, wrong_token_delay=DELAY)
    transport = httpx.ASGITransport(app=restarted.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://panel.test") as client:
        again = await client.get(f"/login?once={code}")
        assert again.status_code == 401
        fresh = make_login_code(env.token, time.time())
        assert (await client.get(f"/login?once={fresh}")).status_code == 303


async def test_an_unreadable_used_codes_file_is_not_a_crash(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    (env.home / "web.used_codes").write_bytes(b"\xff not json")
    restarted = PanelApp(env.panel, env.token, wrong_token_delay=DELAY)
    assert restarted.sessions.used_codes == {}


async def test_the_metrics_token_reads_metrics_and_nothing_else(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    path = env.home / "web.metrics_token"
    assert path.stat().st_mode & 0o777 == 0o600
    metrics_token = path.read_text().strip()
    assert metrics_token != env.token
    scrape = {"Authorization": f"Bearer {metrics_token}"}
    r = await env.client.get("/metrics", headers=scrape)
    assert r.status_code == 200
    assert "picortex_" in r.text
    for method, url in [("GET", "/api/status"), ("GET", "/api/log"), ("POST", "/api/send")]:
        r = await env.client.request(method, url, headers=scrape, json={})
        assert r.status_code == 401
    r = await env.client.post("/login", data={"token": metrics_token})
    assert r.status_code == 401


async def test_a_loose_token_file_is_made_private_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    token = load_or_create_token(tmp_path)
    (tmp_path / "web.token").chmod(0o644)
    assert load_or_create_token(tmp_path) == token
    assert (tmp_path / "web.token").stat().st_mode & 0o777 == 0o600
    assert "now 0600" in caplog.text
    assert token not in caplog.text


@pytest.mark.parametrize("secure", [True, False])
async def test_cookies_are_secure_when_asked(env: Env, secure: bool) -> None:
    app = PanelApp(env.panel, env.token, secure_cookies=secure)
    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url="https://panel.test") as client:
        page = await client.get("/login")
        r = await client.post("/login", data={"token": env.token})
    assert r.status_code == 303
    for cookie in [page.headers["set-cookie"], *r.headers.get_list("set-cookie")]:
        assert ("; secure" in cookie.lower()) is secure, cookie


async def test_a_link_signed_with_another_token_fails(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    code = make_login_code("another-token-entirely-0000000000000", time.time())
    r = await env.client.get(f"/login?once={code}")
    assert r.status_code == 401


async def test_login_with_a_forged_csrf_is_refused(env: Env) -> None:
    await env.client.get("/login")
    r = await env.client.post("/login", data={"token": env.token, "csrf": "forged"})
    assert r.status_code == 403


async def test_forms_without_the_csrf_token_change_nothing(env: Env) -> None:
    await env.login()
    r = await env.client.post(f"/chats/{GENERAL}/attention", data={"mode": "always"})
    assert r.status_code == 403
    assert env.store.get_chat_config(GENERAL) is None
    r = await env.client.post("/trust", data={"user_id": str(BOB), "tier": "user", "csrf": "x"})
    assert r.status_code == 403
    assert env.store.get_tier(BOB) is None


async def test_api_change_with_cookie_needs_the_csrf_header(env: Env) -> None:
    csrf = await env.login()
    url = f"/api/chats/{GENERAL}/attention"
    r = await env.client.post(url, json={"mode": "always"})
    assert r.status_code == 403
    r = await env.client.post(url, json={"mode": "always"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200


async def test_logout_ends_the_session(env: Env) -> None:
    csrf = await env.login()
    await env.client.post("/logout", data={"csrf": csrf})
    r = await env.client.get("/")
    assert r.status_code == 303


# ----- pages -----------------------------------------------------------------------------


async def test_every_page_renders(env: Env) -> None:
    await env.login()
    for path in [
        "/",
        "/chats",
        f"/chats/{GENERAL}",
        "/activity",
        "/trust",
        "/errors",
        "/personas",
        "/send",
        "/settings",
    ]:
        r = await env.client.get(path)
        assert r.status_code == 200, path
        assert "<main>" in r.text
        assert "https://" not in r.text  # nothing from a CDN


async def test_overview_shows_the_shard_this_process_serves(env: Env) -> None:
    await env.login()
    page = await env.client.get("/")
    assert '<dd id="gateway-shard">2/8</dd>' in page.text


async def test_overview_draws_spend_per_workspace(env: Env) -> None:
    now = time.time()
    env.store.add_spend(str(GUILD), "p", 0.25, now)
    env.store.add_spend("dm", "p", 0.5, now - 86400)
    env.store.add_spend("tiny", "p", 0.000001, now)
    await env.login()
    page = await env.client.get("/")
    assert "<svg" in page.text
    assert page.text.count("<rect x=") == 3
    assert str(GUILD) in page.text
    # Money in dollars, fixed-point (SPEC 13: `$0.000001`, never `1e-06`).
    assert "$0.25" in page.text
    assert "tiny: $0.000001</li>" in page.text
    assert "e-0" not in page.text


async def test_overview_lists_the_shards_this_process_holds(env: Env) -> None:
    await env.login()
    page = await env.client.get("/")
    assert 'id="shards"' not in page.text  # one shard: the connection card says it all
    shards = [
        {"shard": [0, 2], "state": "ready", "session_id": "s-zero", "heartbeat_latency_ms": 4.5},
        {"shard": [1, 2], "state": "resuming", "session_id": None, "heartbeat_latency_ms": None},
    ]
    snapshot = env.panel.snapshot
    env.panel.snapshot = lambda: {**snapshot(), "shards": shards}
    page = await env.client.get("/")
    assert "<td>0/2</td><td>ready</td><td>s-zero</td><td>4.5 ms</td>" in page.text
    assert "<td>1/2</td><td>resuming</td><td>\u2013</td><td>\u2013</td>" in page.text
    assert '<dd id="gateway-shard">0,1/2</dd>' in page.text


async def test_overview_shows_the_shards_held_by_lease_and_the_database(env: Env) -> None:
    """SPEC 17: status and the panel show the shards a process holds (with their lease
    epochs), none while it holds none, and whether the shared database is reachable."""
    await env.login()
    snapshot = env.panel.snapshot
    shards = [
        {
            "shard": [3, 8],
            "state": "ready",
            "session_id": "s3",
            "heartbeat_latency_ms": 2.0,
            "epoch": 4,
        },
    ]
    env.panel.snapshot = lambda: {**snapshot(), "shards": shards, "database": "up"}
    page = await env.client.get("/")
    assert '<dd id="gateway-shard">3/8</dd>' in page.text
    assert "<th>Lease epoch</th>" in page.text
    assert "<td>3/8</td><td>ready</td><td>s3</td><td>2.0 ms</td><td>4</td>" in page.text
    assert '<dd id="database-state">up</dd>' in page.text
    env.panel.snapshot = lambda: {
        **snapshot(),
        "shards": [],
        "gateway": {"state": "no shard held", "shard": None},
        "database": "unreachable since 2026-12-03 19:00:00 UTC",
    }
    page = await env.client.get("/")
    assert '<dd id="gateway-shard">none held</dd>' in page.text
    assert "unreachable since" in page.text


async def test_pages_show_writes_the_store_actor_has_not_committed_yet(env: Env) -> None:
    await env.login()
    actor = StoreActor(Store.open(env.home / "picortex.db"))
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        env.panel.store = actor
        commits = actor.commits
        actor.add_spend(str(GUILD), "p", 0.25, time.time())
        page = await env.client.get("/")
        assert actor.commits > commits
        assert "<svg" in page.text
        assert page.text.count("<rect x=") == 1
        nursery.cancel_scope.cancel()
    actor.close()


async def test_chat_page_with_unknown_id_is_404(env: Env) -> None:
    await env.login()
    r = await env.client.get("/chats/123456")
    assert r.status_code == 404
    r = await env.client.get("/chats/not-a-number")
    assert r.status_code == 404


# ----- changes through the executor --------------------------------------------------------


async def test_attention_radio_form_goes_through_the_executor(env: Env) -> None:
    csrf = await env.login()
    r = await env.client.post(
        f"/chats/{GENERAL}/attention", data={"mode": "discriminate", "csrf": csrf}
    )
    assert r.status_code == 303
    config = env.store.get_chat_config(GENERAL)
    assert config is not None
    assert config.attention_mode == "discriminate"
    [event] = env.sink.of("command")
    assert event["source"] == "web"
    assert event["command"] == "attention"
    assert event["text"] == "attention discriminate"
    assert event["result"] == "ok"
    assert event["requester"] == str(OWNER)
    page = await env.client.get(f"/chats/{GENERAL}")
    assert "Attention mode is now discriminate (was mentions-only)." in page.text
    assert 'value="discriminate" checked' in page.text
    assert ChatHome(env.home, str(GENERAL)).exists()


async def test_the_chats_own_agent_prompt_is_edited_with_history_and_diffs(env: Env) -> None:
    csrf = await env.login()
    url = f"/chats/{GENERAL}/own"
    r = await env.client.post(url, data={"prompt": "Speak like a pirate.", "csrf": csrf})
    assert r.status_code == 303
    r = await env.client.post(url, data={"prompt": "Answer in French.\r\n", "csrf": csrf})
    home = ChatHome(env.home, str(GENERAL))
    assert home.read_agent_prompt() == "Answer in French."
    page = (await env.client.get(f"/chats/{GENERAL}")).text
    assert "This chat&#39;s agent prompt is set." in page
    assert 'aria-label="Agent prompt"' in page and ">Answer in French.</textarea>" in page
    agent = page[page.index('id="agent-versions"') :]
    assert "<del>-Speak like a pirate.</del>" in agent
    assert "<ins>+Answer in French.</ins>" in agent
    assert [e["text"] for e in env.sink.of("command")] == [
        "attention prompt Speak like a pirate.",
        "attention prompt Answer in French.",
    ]
    # An empty prompt: the owner's applies again (a commit too).
    await env.client.post(url, data={"prompt": "", "csrf": csrf})
    assert home.read_agent_prompt() is None
    assert "the owner&#39;s prompt again" in (await env.client.get(f"/chats/{GENERAL}")).text


async def test_the_chats_discriminator_model_and_threshold_through_the_form_and_api(
    env: Env,
) -> None:
    csrf = await env.login()
    r = await env.client.post(
        f"/chats/{GENERAL}/own", data={"model": "claude-haiku-9", "threshold": "0.7", "csrf": csrf}
    )
    assert r.status_code == 303
    own = env.store.get_chat_config(GENERAL)
    assert own is not None
    assert (own.attention_mode, own.discriminator_model, own.discriminator_threshold) == (
        None,
        "claude-haiku-9",
        0.7,
    )
    page = (await env.client.get(f"/chats/{GENERAL}")).text
    assert 'name="threshold" value="0.7"' in page
    url = f"/api/chats/{GENERAL}/settings"
    r = await env.client.post(
        url, json={"threshold": "default", "prompt": "Be brief."}, headers=env.bearer()
    )
    assert r.status_code == 200
    assert r.json() == {
        "chat_id": str(GENERAL),
        "agent_prompt": "Be brief.",
        "discriminator_model": "claude-haiku-9",
        "discriminator_threshold": None,
        "default_discriminator_model": "claude-haiku-5-5",
    }
    assert (await env.client.get(url, headers=env.bearer())).json()["agent_prompt"] == "Be brief."
    for body in [{"threshold": "1.5"}, {"model": "two words"}, {"colour": "red"}, {"model": ""}]:
        r = await env.client.post(url, json=body, headers=env.bearer())
        assert r.status_code == 400
        assert r.json()["error"].endswith(".")
    own = env.store.get_chat_config(GENERAL)
    assert own is not None and own.discriminator_threshold is None


async def test_thread_follows_its_parent_until_set(env: Env) -> None:
    env.store.set_attention_mode(GENERAL, "always", 0)
    r = await env.client.get("/api/chats", headers=env.bearer())
    chats = {c["chat_id"]: c for c in r.json()}
    assert chats[str(THREAD)]["attention_mode"] == "always"
    assert chats[str(THREAD)]["kind"] == "thread"
    assert chats[str(GENERAL)]["kind"] == "text"
    assert chats[str(DM)] == {
        "chat_id": str(DM),
        "name": "DM with bob",
        "guild_id": None,
        "kind": "dm",
        "attention_mode": "always",
    }
    assert str(CATEGORY) not in chats
    assert chats[str(STAGE)]["kind"] == "voice"
    assert chats[str(FORUM)]["kind"] == "forum"


async def test_api_attention_returns_the_chat_and_refuses_bad_modes(env: Env) -> None:
    url = f"/api/chats/{GENERAL}/attention"
    r = await env.client.post(url, json={"mode": "silent"}, headers=env.bearer())
    assert r.status_code == 200
    assert r.json()["attention_mode"] == "silent"
    assert r.json()["chat_id"] == str(GENERAL)
    for body in [{"mode": "loud"}, {}, [1], {"mode": 3}]:
        r = await env.client.post(url, json=body, headers=env.bearer())
        assert r.status_code == 400
        assert r.json()["error"].endswith(".")
    r = await env.client.post(url, content=b"{not json", headers=env.bearer())
    assert r.status_code == 400
    r = await env.client.post(
        "/api/chats/abc/attention", json={"mode": "silent"}, headers=env.bearer()
    )
    assert r.status_code == 400
    config = env.store.get_chat_config(GENERAL)
    assert config is not None and config.attention_mode == "silent"


async def test_a_users_own_mode_is_set_shown_and_dropped_through_the_api(env: Env) -> None:
    h = env.bearer()
    url = f"/api/chats/{GENERAL}/users/{BOB}/attention"
    r = await env.client.post(url, json={"mode": "always"}, headers=h)
    assert r.status_code == 200
    assert r.json() == {"chat_id": str(GENERAL), "user_id": str(BOB), "mode": "always"}
    assert env.store.user_attentions()[0].mode == "always"
    listed = await env.client.get(f"/api/chats/{GENERAL}/users", headers=h)
    assert listed.json() == [{"user_id": str(BOB), "name": "bob", "mode": "always"}]
    [event] = env.sink.of("command")
    assert (event["source"], event["command"], event["text"]) == (
        "web",
        "attention",
        f"attention user <@{BOB}> always",
    )
    for body in [{"mode": "loud"}, {}, {"mode": 3}]:
        bad = await env.client.post(url, json=body, headers=h)
        assert bad.status_code == 400 and bad.json()["error"].endswith(".")
    unknown = await env.client.post(
        f"/api/chats/{GENERAL}/users/bob/attention", json={"mode": "silent"}, headers=h
    )
    assert unknown.status_code == 400
    r = await env.client.post(url, json={"mode": "default"}, headers=h)
    assert r.status_code == 200 and r.json()["mode"] == "default"
    assert env.store.user_attentions() == []
    again = await env.client.post(url, json={"mode": "default"}, headers=h)
    assert again.status_code == 400  # nothing to drop: one sentence says so


async def test_the_chat_page_lists_and_sets_users_own_modes(env: Env) -> None:
    csrf = await env.login()
    r = await env.client.post(
        f"/chats/{GENERAL}/users", data={"user_id": str(BOB), "mode": "silent", "csrf": csrf}
    )
    assert r.status_code == 303
    page = await env.client.get(f"/chats/{GENERAL}")
    assert "own mode here is now" in page.text
    assert f'<td>bob <span class="hint">{BOB}</span></td><td>silent</td>' in page.text
    r = await env.client.post(
        f"/chats/{GENERAL}/users", data={"user_id": str(BOB), "mode": "default", "csrf": csrf}
    )
    assert env.store.user_attentions() == []
    assert "Nobody has an own mode here." in (await env.client.get(f"/chats/{GENERAL}")).text


async def test_access_lists_are_read_and_replaced_through_the_api(env: Env) -> None:
    h = env.bearer()
    r = await env.client.get("/api/access", headers=h)
    assert r.json() == {"allow_roles": [], "allow_channels": [], "deny_channels": []}
    r = await env.client.post(
        "/api/access",
        json={"allow_roles": ["55", "56"], "deny_channels": [str(GENERAL)]},
        headers=h,
    )
    assert r.status_code == 200
    assert r.json() == {
        "allow_roles": ["55", "56"],
        "allow_channels": [],
        "deny_channels": [str(GENERAL)],
    }
    assert env.store.runtime_config()["access.allow_roles"] == "55, 56"
    assert {e["text"] for e in env.sink.of("command")} == {
        "config set access.allow_roles 55, 56",
        f"config set access.deny_channels {GENERAL}",
    }
    for body in [{"allow_roles": "55"}, {"allow_roles": ["x"]}, {}, {"nothing": []}]:
        bad = await env.client.post("/api/access", json=body, headers=h)
        assert bad.status_code == 400 and bad.json()["error"].endswith(".")
    r = await env.client.post("/api/access", json={"allow_roles": []}, headers=h)
    assert r.json()["allow_roles"] == []


async def test_trust_api_add_list_delete(env: Env) -> None:
    h = env.bearer()
    r = await env.client.post(
        "/api/trust", json={"user_id": str(BOB), "tier": "trusted"}, headers=h
    )
    assert r.status_code == 200
    assert r.json() == {"user_id": str(BOB), "tier": "trusted"}
    assert env.store.get_tier(BOB) == "trusted"
    listed = (await env.client.get("/api/trust", headers=h)).json()
    assert {"user_id": str(BOB), "tier": "trusted", "owner": False} in listed
    assert {"user_id": str(OWNER), "tier": "admin", "owner": True} in listed
    r = await env.client.delete(f"/api/trust/{BOB}", headers=h)
    assert r.status_code == 204
    assert env.store.get_tier(BOB) is None
    events = env.sink.of("command")
    assert [e["command"] for e in events] == ["whitelist", "whitelist"]
    assert all(e["source"] == "web" for e in events)


async def test_trust_api_bad_input_is_one_sentence(env: Env) -> None:
    h = env.bearer()
    cases = [
        ("post", "/api/trust", {"user_id": "bob", "tier": "user"}),
        ("post", "/api/trust", {"user_id": str(BOB), "tier": "king"}),
        ("post", "/api/trust", {"user_id": str(OWNER), "tier": "user"}),
        ("delete", f"/api/trust/{OWNER}", None),
        ("delete", f"/api/trust/{BOB}", None),
        ("delete", "/api/trust/x1", None),
    ]
    for method, url, body in cases:
        if method == "post":
            r = await env.client.post(url, json=body, headers=h)
        else:
            r = await env.client.delete(url, headers=h)
        assert r.status_code == 400, (url, body)
        error = r.json()["error"]
        assert error and "\n" not in error
    assert env.store.trust_list() == []


async def test_trust_form_adds_a_user(env: Env) -> None:
    csrf = await env.login()
    await env.client.post("/trust", data={"user_id": str(BOB), "tier": "user", "csrf": csrf})
    assert env.store.get_tier(BOB) == "user"
    page = await env.client.get("/trust")
    assert "Added as user: @bob." in page.text
    await env.client.post(f"/trust/{BOB}/remove", data={"csrf": csrf})
    assert env.store.get_tier(BOB) is None


def _bob_said_things(store: Store) -> None:
    store.add_memory_message(31, GENERAL, GUILD, BOB, "bob", "insomnia again", 100.0)
    store.add_memory_message(32, GENERAL, GUILD, BOB, "bob", "insomnia in june", 100.0)
    store.add_observation("sleep", 31, GENERAL, GUILD, "insomnia", "insomnia again", 100.0, BOB)
    store.add_memory_message(33, GENERAL, GUILD, OWNER, "alice", "insomnia? me too", 100.0)


def _authors(store: Store) -> set[int | None]:
    return {h.author_id for h in store.search_memory("insomnia", 0.0, None, limit=20)}


async def test_forget_api_deletes_a_users_memory_through_the_executor(env: Env) -> None:
    _bob_said_things(env.store)
    r = await env.client.post(f"/api/forget/{BOB}", headers=env.bearer())
    assert r.status_code == 200
    assert r.json() == {"user_id": str(BOB), "messages": 2, "observations": 1}
    assert _authors(env.store) == {OWNER}
    (event,) = env.sink.of("command")
    assert (event["command"], event["source"], event["result"]) == ("forget", "web", "ok")
    assert event["forgotten"] == [{"user_id": str(BOB), "messages": 2, "observations": 1}]
    r = await env.client.post("/api/forget/x1", headers=env.bearer())
    assert r.status_code == 400
    assert r.json()["error"] == "user_id must be a Discord id (digits)."


async def test_forget_form_needs_the_csrf_token_and_says_how_much_went(env: Env) -> None:
    _bob_said_things(env.store)
    csrf = await env.login()
    r = await env.client.post("/trust/forget", data={"user_id": str(BOB), "csrf": "x"})
    assert r.status_code == 403
    assert _authors(env.store) == {BOB, OWNER}
    r = await env.client.post("/api/forget/" + str(BOB))  # a session without the header
    assert r.status_code == 403
    await env.client.post("/trust/forget", data={"user_id": str(BOB), "csrf": csrf})
    assert _authors(env.store) == {OWNER}
    page = await env.client.get("/trust")
    assert "Forgot what @bob said: 2 messages and 1 observation deleted." in page.text


async def test_errors_are_listed_and_resolved(env: Env) -> None:
    eid = env.store.add_invocation_error("500", "default", "77", "generate", "boom", None, 1.0)
    h = env.bearer()
    rows = (await env.client.get("/api/errors?unresolved=1", headers=h)).json()
    assert [r["id"] for r in rows] == [str(eid)]
    assert rows[0]["signal_id"] == "77"
    r = await env.client.post(f"/api/errors/{eid}/resolve", json={"as": "fixed"}, headers=h)
    assert r.status_code == 200
    assert r.json()["resolution"] == "fixed"
    assert (await env.client.get("/api/errors?unresolved=1", headers=h)).json() == []
    assert len((await env.client.get("/api/errors", headers=h)).json()) == 1
    r = await env.client.post(f"/api/errors/{eid}/resolve", json={"as": "forgotten"}, headers=h)
    assert r.status_code == 400
    r = await env.client.post("/api/errors/999/resolve", json={"as": "fixed"}, headers=h)
    assert r.status_code == 400
    assert r.json() == {"error": "No invocation error has id 999."}
    assert env.sink.of("command")[0]["source"] == "web"


async def test_errors_page_and_api_show_what_composting_paused(env: Env) -> None:
    now = time.time()
    ids = [
        env.store.add_invocation_error("500", "sleep", str(n), "generate", "boom", None, now - n)
        for n in range(5)  # the default threshold
    ]
    h = env.bearer()
    (paused,) = (await env.client.get("/api/errors/paused", headers=h)).json()
    assert (paused["kind"], paused["name"], paused["errors"]) == ("persona", "sleep", 5)
    assert paused["reason"].endswith("reached the threshold of 5")
    await env.login()
    page = await env.client.get("/errors")
    assert "Paused by composting" in page.text
    assert paused["until"].replace("T", " ")[:19] in page.text
    r = await env.client.post(f"/api/errors/{ids[0]}/resolve", json={"as": "fixed"}, headers=h)
    assert r.status_code == 200
    assert (await env.client.get("/api/errors/paused", headers=h)).json() == []
    assert "Nothing is paused by composting." in (await env.client.get("/errors")).text


async def test_send_posts_without_pings_and_logs_a_manual_event(env: Env) -> None:
    h = env.bearer()
    r = await env.client.post(
        "/api/send", json={"channel_id": str(GENERAL), "content": "hello @everyone"}, headers=h
    )
    assert r.status_code == 200
    assert r.json()["channel_id"] == str(GENERAL)
    assert env.rest.posted == [(GENERAL, "hello @everyone", {"parse": []})]
    [event] = env.sink.of("manual")
    assert event["source"] == "web"
    assert event["content_length"] == len("hello @everyone")
    assert event["channel_id"] == str(GENERAL)
    for body in [
        {"channel_id": "x", "content": "a"},
        {"channel_id": str(GENERAL), "content": ""},
        {"channel_id": str(GENERAL), "content": "a" * 2001},
    ]:
        r = await env.client.post("/api/send", json=body, headers=h)
        assert r.status_code == 400
    assert len(env.rest.posted) == 1


# ----- prompts ------------------------------------------------------------------------------


def git_log(home: Path, chat: int) -> list[str]:
    out = subprocess.run(
        ["git", "log", "--format=%s"],
        cwd=home / "chats" / str(chat),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


async def test_prompt_save_is_a_commit_with_a_diff_in_history(env: Env) -> None:
    csrf = await env.login()
    page = await env.client.get(f"/chats/{GENERAL}")
    assert "Seed discriminator prompt" in page.text
    text = ChatHome(env.home, str(GENERAL)).read_prompt() + "Only answer about cake.\n"
    r = await env.client.post(f"/chats/{GENERAL}/prompt", data={"prompt": text, "csrf": csrf})
    assert r.status_code == 303
    assert git_log(env.home, GENERAL)[0] == "Prompt edited in the web panel"
    assert ChatHome(env.home, str(GENERAL)).read_prompt() == text
    page = await env.client.get(f"/chats/{GENERAL}")
    assert "<ins>+Only answer about cake.</ins>\n" in page.text
    assert "diff --git" not in page.text
    assert "Saved the discriminator prompt as a new version." in page.text
    events = [e for e in env.sink.of("command") if e["command"] == "prompt"]
    assert events and events[0]["source"] == "web"
    await env.client.post(f"/chats/{GENERAL}/prompt", data={"prompt": text, "csrf": csrf})
    assert len(git_log(env.home, GENERAL)) == 2  # unchanged: no new commit


async def test_discriminator_test_shows_decision_reason_and_cost(env: Env) -> None:
    csrf = await env.login()
    r = await env.client.post(f"/chats/{GENERAL}/test", data={"n": "2", "csrf": csrf})
    assert r.status_code == 200
    assert len(env.model.requests) == 2
    assert all(req.stage == "discriminate" for req in env.model.requests)
    rows = re.findall(r'<td class="decision (\w+)">', r.text)
    assert rows == ["skip", "respond"]
    assert "who wants cake?" in r.text
    assert "$0.00002<" in r.text
    r = await env.client.post(f"/chats/{GENERAL}/test", data={"n": "99", "csrf": csrf})
    assert r.status_code == 303
    assert len(env.model.requests) == 2
    # Below the chat's confidence threshold, the test run stays quiet as the bot would.
    env.store.set_discriminator(GENERAL, None, 0.7, 0.0)
    env.model.confidence = 0.5
    r = await env.client.post(f"/chats/{GENERAL}/test", data={"n": "2", "csrf": csrf})
    assert re.findall(r'<td class="decision (\w+)">', r.text) == ["skip", "skip"]
    assert "below the chat&#39;s threshold 0.7" in r.text


# ----- activity and the log API ------------------------------------------------------------


async def test_activity_shows_the_message_beside_each_decision(env: Env) -> None:
    write_log(
        env.home,
        [
            {
                "event": "decision",
                "message_id": 12,
                "channel_id": GENERAL,
                "author_id": BOB,
                "outcome": "ignore",
                "reason": "untrusted author: never answered",
            },
            {
                "event": "decision",
                "message_id": 11,
                "channel_id": GENERAL,
                "author_id": OWNER,
                "outcome": "respond",
                "reason": "mention of the bot",
            },
        ],
    )
    await env.login()
    page = await env.client.get("/activity?message_id=12")
    assert "untrusted author: never answered" in page.text
    assert "who wants cake?" in page.text
    assert "mention of the bot" not in page.text


async def test_activity_shows_the_route_choice_and_its_reason(env: Env) -> None:
    write_log(
        env.home,
        [
            {
                "event": "decision",
                "message_id": 12,
                "channel_id": GENERAL,
                "author_id": OWNER,
                "outcome": "route",
                "reason": "complex: several steps",
                "tier": "complex",
                "model": "claude-opus-5-5",
                "routed_by": "model",
            }
        ],
    )
    await env.login()
    page = await env.client.get("/activity?message_id=12")
    assert "complex: several steps" in page.text
    assert "tier complex · claude-opus-5-5 · chosen by model" in page.text


async def test_activity_shows_amounts_as_dollars(env: Env) -> None:
    write_log(
        env.home,
        [
            {"event": "llm", "model": "m", "stage": "generate", "cost_usd": 0.000001},
            {"event": "budget", "workspace": "dm", "spent_usd": 1e-06, "ceiling_usd": 2e-06},
        ],
    )
    await env.login()
    page = await env.client.get("/activity")
    # SPEC 13: amounts as dollars (`$0.000001`, never `1e-06`).
    assert "m · generate" in page.text and "· $0.000001 ·" in page.text
    assert "spent_usd=$0.000001" in page.text
    assert "ceiling_usd=$0.000002" in page.text
    assert "e-06" not in page.text


async def test_log_api_filters_and_counts_after_filtering(env: Env) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(30):
        rows.append(
            {
                "event": "decision",
                "message_id": 100 + i,
                "channel_id": GENERAL,
                "author_id": BOB if i % 2 else OWNER,
                "outcome": "respond",
                "reason": "r",
            }
        )
        rows.append({"event": "llm", "signal_id": str(100 + i), "model": "m", "cost_usd": 0.1})
    write_log(env.home, rows)
    h = env.bearer()
    got = (await env.client.get("/api/log?n=5&event=decision", headers=h)).json()
    assert [g["message_id"] for g in got] == ["125", "126", "127", "128", "129"]
    got = (await env.client.get(f"/api/log?n=3&user_id={BOB}", headers=h)).json()
    assert [g["message_id"] for g in got] == ["125", "127", "129"]
    got = (await env.client.get("/api/log?message_id=107", headers=h)).json()
    assert [g["event"] for g in got] == ["decision", "llm"]
    got = (await env.client.get(f"/api/log?channel_id={GENERAL}&n=1000", headers=h)).json()
    assert len(got) == 30
    assert all(isinstance(g["channel_id"], str) for g in got)
    for bad in ["n=0", "n=abc", "n=1001", "channel_id=general", "message_id=-1"]:
        r = await env.client.get(f"/api/log?{bad}", headers=h)
        assert r.status_code == 400, bad


async def test_status_api_has_string_ids(env: Env) -> None:
    r = await env.client.get("/api/status", headers=env.bearer())
    assert r.status_code == 200
    assert r.json()["mailboxes"][0]["channel_id"] == str(GENERAL)


# ----- metrics and personas -----------------------------------------------------------------


async def test_metrics_in_prometheus_text_format(env: Env) -> None:
    write_log(
        env.home,
        [
            {"event": "decision", "outcome": "respond"},
            {
                "event": "llm",
                "model": "claude-haiku-5-5",
                "stage": "discriminate",
                "outcome": "ok",
                "cost_usd": 0.0004,
            },
            {"event": "rest", "outcome": "rate_limited"},
        ],
    )
    r = await env.client.get("/metrics", headers=env.bearer())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'picortex_decisions_total{outcome="respond"} 1.0' in text
    assert (
        'picortex_model_calls_total{model="claude-haiku-5-5",outcome="ok",stage="discriminate"} 1.0'
        in text
    )
    assert 'picortex_model_cost_usd_total{model="claude-haiku-5-5"} 0.0004' in text
    assert "picortex_rest_rate_limited_total 1.0" in text
    assert f'picortex_mailbox_depth{{channel_id="{GENERAL}"}} 3.0' in text
    assert 'picortex_actor_restarts_total{actor="llm"} 1.0' in text
    assert "picortex_gateway_heartbeat_latency_seconds 0.0415" in text
    write_log(env.home, [{"event": "decision", "outcome": "respond"}])
    text = (await env.client.get("/metrics", headers=env.bearer())).text
    assert 'picortex_decisions_total{outcome="respond"} 2.0' in text


async def test_personas_page_shows_validation_errors(env: Env) -> None:
    (env.home / "agents.yaml").write_text("personas:\n  - id: x\n", encoding="utf-8")
    await env.login()
    page = await env.client.get("/personas")
    assert page.status_code == 200
    assert "The file has an error" in page.text
    assert "personas:" in page.text


# ----- settings ----------------------------------------------------------------------------


async def test_settings_page_shows_every_config_set_key_grouped_with_bounds(env: Env) -> None:
    await env.login()
    page = (await env.client.get("/settings")).text
    fields = settings_form(page)
    assert fields.keys() - {"csrf"} == runtime_values(env.panel.settings()).keys()
    assert fields["wakeword"] == "!s"
    assert fields["budget.user_requests_per_minute"] == "6"
    assert fields["attention.group"] == "mentions-only"
    assert fields["replies.stream"] == "true"
    legends = re.findall(r"<legend>([^<]+)</legend>", page)
    assert legends[:4] == ["Wakeword", "Conversation", "Limits", "Models"]
    assert {"Prices (USD per million tokens)", "Response policy", "Polls"} <= set(legends)
    row = re.search(
        r'<div class="setting">\s*<label for="set-budget.ceiling_usd">.*?</div>', page, re.S
    )
    assert row is not None
    assert 'min="0" max="10000"' in row.group(0)
    assert ">owner only</span>" in row.group(0)
    assert "$0.00 to $10000.00" in row.group(0)
    row = re.search(r'<label for="set-context_messages">.*?</div>', page, re.S)
    assert row is not None
    assert "a whole number, 0 to 100" in row.group(0)
    assert ">owner only</span>" not in row.group(0)
    assert ">default</span>" in row.group(0)
    assert 'maxlength="8"' in page  # the wakeword's length


async def test_saving_settings_sets_only_what_changed_through_the_executor(env: Env) -> None:
    await env.login()
    fields = settings_form((await env.client.get("/settings")).text)
    fields |= {"wakeword": "!p", "budget.user_requests_per_minute": "2"}
    fields["continuation_seconds"] = "10.0"  # the same value, written another way
    r = await env.client.post("/settings", data=fields)
    assert r.status_code == 303
    assert r.headers["location"] == "/settings"
    assert env.store.runtime_config() == {"wakeword": "!p", "budget.user_requests_per_minute": "2"}
    assert env.panel.settings().wakeword == "!p"
    assert env.panel.settings().budget.user_requests_per_minute == 2
    events = env.sink.of("command")
    assert [(e["command"], e["text"], e["result"], e["source"]) for e in events] == [
        ("config", "config set wakeword !p", "ok", "web"),
        ("config", "config set budget.user_requests_per_minute 2", "ok", "web"),
    ]
    page = (await env.client.get("/settings")).text
    assert "wakeword is now !p. budget.user_requests_per_minute is now 2." in page
    row = re.search(r'<label for="set-wakeword">.*?</div>', page, re.S)
    assert row is not None
    assert 'value="!p"' in row.group(0)
    assert ">runtime</span>" in row.group(0)
    # Saving the page as it is now changes and logs nothing.
    r = await env.client.post("/settings", data=settings_form(page))
    assert len(env.sink.of("command")) == 2
    page = (await env.client.get("/settings")).text
    assert "Nothing to save: every setting already has that value." in page


async def test_the_owner_prompt_is_a_text_area_that_keeps_its_lines(env: Env) -> None:
    await env.login()
    page = (await env.client.get("/settings")).text
    assert '<textarea id="set-agent.system_prompt"' in page
    fields = settings_form(page) | {"agent.system_prompt": "You are {{bot_name}}.\nBe brief."}
    r = await env.client.post("/settings", data=fields)
    assert r.status_code == 303
    assert env.store.runtime_config() == {"agent.system_prompt": "You are {{bot_name}}.\nBe brief."}
    assert env.panel.settings().agent.system_prompt == "You are {{bot_name}}.\nBe brief."
    page = (await env.client.get("/settings")).text
    assert "You are {{bot_name}}.\nBe brief.</textarea>" in page


async def test_a_value_out_of_bounds_is_one_sentence_and_nothing_is_saved(env: Env) -> None:
    await env.login()
    fields = settings_form((await env.client.get("/settings")).text)
    fields |= {"wakeword": "!p", "context_messages": "101"}
    await env.client.post("/settings", data=fields)
    assert env.store.runtime_config() == {}
    assert env.panel.settings().wakeword == "!s"
    [event] = env.sink.of("command")
    assert (event["text"], event["result"], event["source"]) == (
        "config set context_messages 101",
        "error",
        "web",
    )
    page = (await env.client.get("/settings")).text
    [flash] = re.findall(r'<p class="flash bad" role="status">([^<]*)</p>', page)
    assert html.unescape(flash) == (
        "Could not set context_messages: context_messages must be at most 100, got 101;"
        " nothing was saved."
    )
    assert 'name="wakeword" value="!s"' in page


async def test_owner_only_settings_need_an_owner(env: Env) -> None:
    await env.login()
    env.panel.settings = SettingsSource(
        Settings(home=env.home), AdminStore(env.store)
    )  # no owner set
    fields = settings_form((await env.client.get("/settings")).text)
    await env.client.post("/settings", data=fields | {"budget.ceiling_usd": "1"})
    assert env.store.runtime_config() == {}
    page = (await env.client.get("/settings")).text
    assert "Only the owner can change budget.ceiling_usd; nothing was saved." in page


async def test_settings_api_lists_values_sources_bounds_and_owner_marks(env: Env) -> None:
    (env.home / "picortex.toml").write_text('context_chars = 4000\n[prices."m-1"]\ninput = 1\n')
    csrf = await env.login()
    await env.client.post("/settings", data={"csrf": csrf, "attention.dm": "silent"})
    r = await env.client.get("/api/settings", headers=env.bearer())
    assert r.status_code == 200
    found = {s["key"]: s for s in r.json()}
    assert found.keys() == runtime_values(env.panel.settings()).keys()
    assert found["attention.dm"] == {
        "key": "attention.dm",
        "group": "attention",
        "value": "silent",
        "source": "runtime",
        "owner_only": False,
        "bounds": {
            "kind": "choice",
            "min": None,
            "max": None,
            "choices": list(ATTENTION_MODES),
            "text": "one of " + ", ".join(ATTENTION_MODES),
        },
    }
    assert found["context_chars"]["source"] == "file"
    assert found["context_messages"]["source"] == "default"
    assert found["budget.user_daily_usd"]["owner_only"] is True
    assert found["budget.user_daily_usd"]["bounds"]["text"] == "$0.00 to $10000.00"
    assert found["prices.claude-haiku-5-5.input"]["bounds"]["max"] == 1000


async def test_the_settings_form_takes_every_key_but_not_without_bound(env: Env) -> None:
    csrf = await env.login()
    many = {f"f{i}": "1" for i in range(300)}
    r = await env.client.post("/settings", data={**many, "csrf": csrf, "wakeword": "!p"})
    assert r.status_code == 400
    assert env.store.runtime_config() == {}


# ----- CSRF on every change -----------------------------------------------------------------


def _changing_routes() -> list[tuple[str, str]]:
    """(method, path) of every state-changing route, read from a real app's route table."""
    nowhere = Path("/nonexistent")
    stub = SimpleNamespace(home=nowhere, action_log_path=nowhere, snapshot=dict)
    app = PanelApp(cast(Panel, stub), "t" * 43)
    found = []
    for route in app.app.routes:
        if isinstance(route, Route) and route.path != "/login":
            found += [(m, route.path) for m in sorted((route.methods or set()) - {"GET", "HEAD"})]
    return found


CHANGING_ROUTES = _changing_routes()
CAROL = 1003
# Every field any panel form or JSON body reads, valued so that the change would be made.
CHANGE_FIELDS = {
    "mode": "always",
    "prompt": "Answer only about cake.\n",
    "n": "2",
    "user_id": str(CAROL),
    "tier": "user",
    "as": "fixed",
    "channel_id": str(GENERAL),
    "content": "hello",
    "back": "list",
    "wakeword": "!p",
    "deny_channels": [str(GENERAL)],
    "threshold": "0.5",
}


def _state(env: Env) -> object:
    db = sqlite3.connect(env.home / "picortex.db")
    try:
        dump = list(db.iterdump())
    finally:
        db.close()
    chat = ChatHome(env.home, str(GENERAL))
    return (
        dump,
        list(env.rest.posted),
        [dict(r) for r in env.sink.rows],
        chat.read_prompt() if chat.prompt_path.exists() else None,
        sorted(env.app.sessions.by_id),
    )


def test_the_route_table_has_changes_to_check() -> None:
    assert ("POST", "/api/send") in CHANGING_ROUTES
    assert ("POST", "/chats/{chat_id}/prompt") in CHANGING_ROUTES
    assert ("DELETE", "/api/trust/{user_id}") in CHANGING_ROUTES
    assert ("POST", "/settings") in CHANGING_ROUTES


@pytest.mark.parametrize(
    ("method", "route"), CHANGING_ROUTES, ids=[" ".join(r) for r in CHANGING_ROUTES]
)
async def test_every_change_without_the_csrf_token_is_refused_and_changes_nothing(
    env: Env, method: str, route: str
) -> None:
    csrf = await env.login()
    env.store.set_tier(BOB, "user")
    eid = env.store.add_invocation_error("500", "default", "77", "generate", "boom", None, 1.0)
    url = route.format(chat_id=GENERAL, user_id=BOB, error_id=eid)
    api = route.startswith("/api/")

    async def attempt(token: str | None) -> httpx.Response:
        if api:
            headers = {} if token is None else {"X-CSRF-Token": token}
            body = None if method == "DELETE" else orjson.dumps(CHANGE_FIELDS)
            return await env.client.request(method, url, content=body, headers=headers)
        form = CHANGE_FIELDS if token is None else {**CHANGE_FIELDS, "csrf": token}
        return await env.client.request(method, url, data=form)

    before = _state(env)
    for token in (None, "", "forged", csrf + "x"):
        r = await attempt(token)
        assert r.status_code == 403, (token, r.text)
        assert _state(env) == before
    # The same request with the session's token is a change: the refusal above was the check.
    r = await attempt(csrf)
    assert r.status_code in (200, 204, 303), r.text
    assert _state(env) != before


# ----- body caps and sessionless requests ---------------------------------------------------


def padded(kind: str, fields: dict[str, str], size: int) -> bytes:
    """A form or JSON body of exactly `size` bytes: `fields` and a `pad` field filling it."""
    if kind == "form":
        base = urlencode({**fields, "pad": ""}).encode()
        return base + b"x" * (size - len(base))
    base = orjson.dumps({**fields, "pad": ""})
    return base[:-2] + b"x" * (size - len(base)) + b'"}'


class Chunked(httpx.AsyncByteStream):
    """A request body sent in parts without Content-Length; counts the parts taken."""

    def __init__(self, parts: Iterable[bytes]) -> None:
        self.parts = iter(parts)
        self.taken = 0

    def __aiter__(self) -> Chunked:
        return self

    async def __anext__(self) -> bytes:
        part = next(self.parts, None)
        if part is None:
            raise StopAsyncIteration
        self.taken += 1
        return part


async def post_chunked(
    client: httpx.AsyncClient, url: str, body: Chunked, headers: dict[str, str]
) -> httpx.Response:
    request = client.build_request("POST", url, headers=headers)
    del request.headers["content-length"]
    request.headers["transfer-encoding"] = "chunked"
    request.stream = body
    return await client.send(request)


def in_parts(body: bytes, size: int = 4096) -> Iterator[bytes]:
    return (body[i : i + size] for i in range(0, len(body), size))


# (route, its cap, body kind, the fields of a change it makes)
CAPPED = [
    ("/login", 64 * 1024, "form", {}),
    ("/trust", 64 * 1024, "form", {"user_id": str(BOB), "tier": "user"}),
    ("/api/trust", 64 * 1024, "json", {"user_id": str(BOB), "tier": "user"}),
    ("/api/send", 1024 * 1024, "json", {"channel_id": str(GENERAL), "content": "hi"}),
    (f"/chats/{GENERAL}/prompt", 1024 * 1024, "form", {"prompt": "Only cake.\n"}),
    ("/settings", 64 * 1024, "form", {"wakeword": "!p"}),
]


def _changed(env: Env, route: str) -> bool:
    if route == "/login":
        return bool(env.app.sessions.by_id)
    if route.endswith("/prompt"):
        return ChatHome(env.home, str(GENERAL)).read_prompt() == "Only cake.\n"
    if route == "/api/send":
        return bool(env.rest.posted)
    if route == "/settings":
        return env.store.runtime_config().get("wakeword") == "!p"
    return env.store.get_tier(BOB) == "user"


@pytest.mark.parametrize("framed", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("route", "cap", "kind", "fields"), CAPPED, ids=[c[0] for c in CAPPED])
async def test_a_body_at_its_cap_is_read_and_one_byte_more_is_refused(
    env: Env, route: str, cap: int, kind: str, fields: dict[str, str], framed: bool
) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if kind == "json":
        headers = {"Content-Type": "application/json", **env.bearer()}
    if route == "/login":
        fields = {"token": env.token}
    elif kind == "form":
        csrf = await env.login()
        fields = {**fields, "csrf": csrf}

    async def post(size: int) -> httpx.Response:
        body = padded(kind, fields, size)
        assert len(body) == size
        if framed:
            return await env.client.post(route, content=body, headers=headers)
        return await post_chunked(env.client, route, Chunked(in_parts(body)), headers)

    sessions = set(env.app.sessions.by_id)
    r = await post(cap + 1)
    assert r.status_code == 413
    assert r.text.strip() and "too large" in r.text
    assert set(env.app.sessions.by_id) == sessions
    assert not _changed(env, route)
    r = await post(cap)
    assert r.status_code in (200, 303), r.text
    assert _changed(env, route)


async def test_past_the_cap_the_rest_of_the_body_is_not_read(env: Env) -> None:
    part = 64 * 1024
    parts = (b"token=" + b"x" * (part - 6) if i == 0 else b"x" * part for i in range(1024))
    body = Chunked(parts)  # 64 MiB
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    r = await post_chunked(env.client, "/login", body, headers)
    assert r.status_code == 413
    assert body.taken <= 2
    assert r.headers["connection"] == "close"


async def test_a_declared_length_past_the_cap_is_refused_before_reading(env: Env) -> None:
    body = Chunked([b"{}"])
    headers = {**env.bearer(), "Content-Length": str(64 * 1024 + 1)}
    request = env.client.build_request("POST", "/api/trust", headers=headers)
    request.stream = body
    r = await env.client.send(request)
    assert r.status_code == 413
    assert r.json() == {"error": "The body is too large."}
    assert body.taken == 0


async def test_forms_take_no_files_and_few_fields(env: Env) -> None:
    csrf = await env.login()
    files = {"prompt": ("p.txt", b"x" * 1000, "text/plain")}
    upload = httpx.Request("POST", "/", data={"csrf": csrf}, files=files)
    body, kind = upload.read(), upload.headers["content-type"]
    url = f"/chats/{GENERAL}/prompt"
    r = await env.client.post(url, content=body, headers={"Content-Type": kind})
    assert r.status_code == 400
    assert list((env.home).glob("**/p.txt")) == []
    many = {f"f{i}": "1" for i in range(40)}
    r = await env.client.post("/trust", data={**many, "csrf": csrf, "user_id": str(BOB)})
    assert r.status_code == 400
    assert env.store.get_tier(BOB) is None


async def test_sessionless_requests_are_limited_in_number(
    env: Env, autojump_clock: trio.abc.Clock
) -> None:
    await env.login()
    guessers = httpx.AsyncClient(transport=env.client._transport, base_url="http://panel.test")
    answers: list[int] = []

    async def guess() -> None:
        r = await guessers.post("/login", data={"token": "guess"})
        answers.append(r.status_code)

    async with guessers, trio.open_nursery() as nursery:
        for _ in range(MAX_UNAUTHENTICATED):
            nursery.start_soon(guess)
        await trio.sleep(DELAY / 4)  # every guess is now waiting out the wrong-token delay
        start = trio.current_time()
        r = await guessers.post("/login", data={"token": env.token})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
        r = await guessers.get("/api/status", headers=env.bearer())
        assert r.status_code == 503
        assert trio.current_time() == start  # refused at once, nothing checked or read
        page = await env.client.get("/")  # a logged-in browser is still served
        assert page.status_code == 200
        assert answers == []
    assert answers == [401] * MAX_UNAUTHENTICATED
    r = await env.client.post("/login", data={"token": env.token})
    assert r.status_code == 303
