"""The panel of a running bot against the simulator: `picortex web`, and API changes that
change what the bot answers."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from picortex.store import Store
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time

WEB = "[web]\nport = 0\n"


async def test_picortex_web_prints_the_running_panel_and_its_link_logs_in(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml=WEB) as run:
        assert run.bot.web is not None
        await run.bot.web.ready.wait()
        done = await run.cli("web")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"panel:      {run.bot.web.url}\n" in done.stdout
        link = re.search(r"log in:\s+(\S+)", done.stdout)
        assert link is not None
        token = (run.home / "web.token").read_text().strip()
        assert token not in done.stdout
        async with httpx.AsyncClient() as client:
            r = await client.get(link.group(1))
            assert r.status_code == 303
            page = await client.get(run.bot.web.url + "/")
            assert page.status_code == 200
            assert "Overview" in page.text
        async with httpx.AsyncClient() as other:
            again = await other.get(link.group(1))
            assert again.status_code == 401


async def test_api_attention_and_trust_change_what_the_bot_answers(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=WEB) as run:
        assert run.bot.web is not None
        await run.bot.web.ready.wait()
        token = (run.home / "web.token").read_text().strip()
        w = run.world
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=run.bot.web.url, headers=headers) as api:
            chats = (await api.get("/api/chats")).json()
            general = next(c for c in chats if c["name"] == "general")
            assert general["attention_mode"] == "mentions-only"
            assert general["chat_id"] == str(w.general_id)

            # Unaddressed chatter in a mentions-only chat gets no answer; the mention after
            # it is decided after it (one channel, in order), so its reply is the sync point.
            quiet = run.say(w.random_id, w.alice_id, "nobody mentioned the bot here")
            ping = run.say(w.random_id, w.alice_id, f"{run.mention()} ping")
            await run.wait_until(lambda: bool(run.replies_to(int(ping["id"]))))
            assert not run.replies_to(int(quiet["id"]))
            r = await api.post(f"/api/chats/{w.general_id}/attention", json={"mode": "always"})
            assert r.json()["attention_mode"] == "always"
            loud = run.say(w.general_id, w.alice_id, "no mention, but now answer")
            await run.wait_until(lambda: bool(run.replies_to(int(loud["id"]))))
            [change] = [e for e in run.events("command") if e.get("source") == "web"]
            assert change["command"] == "attention"

            stranger = run.say(w.general_id, w.bob_id, f"{run.mention()} hello?")
            await run.wait_event("decision", message_id=int(stranger["id"]), outcome="ignore")
            r = await api.post("/api/trust", json={"user_id": str(w.bob_id), "tier": "user"})
            assert r.status_code == 200
            # Committed before the panel answered: another connection already sees it.
            other = Store.open(run.home / "picortex.db")
            try:
                assert other.get_tier(w.bob_id) == "user"
            finally:
                other.close()
            friend = run.say(w.general_id, w.bob_id, f"{run.mention()} and now?")
            await run.wait_until(lambda: bool(run.replies_to(int(friend["id"]))))

            why = (await api.get(f"/api/log?message_id={stranger['id']}")).json()
            assert [e["reason"] for e in why if e["event"] == "decision"] == [
                "untrusted author: never answered"
            ]
            r = await api.delete(f"/api/trust/{w.bob_id}")
            assert r.status_code == 204
            assert run.bot.store.get_tier(w.bob_id) is None
