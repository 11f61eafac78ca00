"""The panel of a running bot against the simulator: `picortex web`, and API changes that
change what the bot answers."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from picortex.store import Store
from tests.e2e.harness import running_bot
from tests.web.forms import settings_form

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


async def test_settings_saved_in_the_panel_are_in_force_at_the_next_message(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml=WEB, relaxed_limits=True) as run:
        assert run.bot.web is not None
        await run.bot.web.ready.wait()
        token = (run.home / "web.token").read_text().strip()
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        async with httpx.AsyncClient(base_url=run.bot.web.url) as browser:
            r = await browser.post("/login", data={"token": token})
            assert r.status_code == 303
            fields = settings_form((await browser.get("/settings")).text)
            # An out-of-bounds limit beside a good wakeword: one sentence, nothing saved.
            bad = fields | {"wakeword": "!p", "budget.user_requests_per_minute": "601"}
            await browser.post("/settings", data=bad)
            page = (await browser.get("/settings")).text
            assert "must be at most 600, got 601; nothing was saved." in page
            assert run.bot.source().wakeword == "!s"
            # Each question its own request: no continuation window.
            good = fields | {
                "wakeword": "!p",
                "budget.user_requests_per_minute": "1",
                "continuation_seconds": "0",
            }
            r = await browser.post("/settings", data=good)
            assert r.status_code == 303
            page = (await browser.get("/settings")).text
            assert "wakeword is now !p." in page
        saved = [e for e in run.events("command") if e.get("source") == "web"]
        assert [(e["text"], e["result"]) for e in saved] == [
            ("config set budget.user_requests_per_minute 601", "error"),
            ("config set wakeword !p", "ok"),
            ("config set continuation_seconds 0", "ok"),
            ("config set budget.user_requests_per_minute 1", "ok"),
        ]

        # The new wakeword is a command at once; the old one is a plain mention now.
        help_ask = run.say(w.general_id, w.alice_id, f"{run.mention()} !p help")
        await run.wait_until(lambda: bool(run.replies_to(int(help_ask["id"]))))
        [help_reply] = run.replies_to(int(help_ask["id"]))
        assert "(start with `!p `)" in help_reply["content"]
        await run.wait_event("command", message_id=int(help_ask["id"]), command="help")
        old = run.say(w.general_id, w.alice_id, f"{run.mention()} !s help")
        await run.wait_until(lambda: bool(run.replies_to(int(old["id"]))))
        assert not [e for e in run.events("command") if str(e.get("message_id")) == old["id"]]
        assert "(start with" not in run.replies_to(int(old["id"]))[0]["content"]

        # Bob may ask once a minute now: his second question gets the polite line.
        first = run.say(w.general_id, w.bob_id, f"{run.mention()} question one?")
        await run.wait_event("llm", signal_id=int(first["id"]))
        second = run.say(w.general_id, w.bob_id, f"{run.mention()} question two?")
        await run.wait_until(lambda: bool(run.replies_to(int(second["id"]))))
        [polite] = run.replies_to(int(second["id"]))
        assert polite["content"].startswith("Sorry, that's more questions")
        [refusal] = run.events("budget")
        assert (refusal["limit"], refusal["user_id"]) == ("user_rate", str(w.bob_id))
