"""Attachments to the model end to end (SPEC 16): image blocks, text files, caps, hosts."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import trio

from picortex.sim.httpserver import HttpRequest, HttpResponse, serve_http
from picortex.sim.model import ModelCall
from picortex.sim.world import tiny_png
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

NO_CONTINUATION = "continuation_seconds = 0\n"
MB = 1024 * 1024


def blocks(call: ModelCall, kind: str) -> list[dict[str, Any]]:
    (message,) = call.messages
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if kind == "text" else []
    return [b for b in content if b["type"] == kind]


def prompt_text(call: ModelCall) -> str:
    return "\n".join(b["text"] for b in blocks(call, "text"))


async def answer_to(run: Running, message: dict[str, Any]) -> str:
    await run.wait_until(lambda: bool(run.replies_to(int(message["id"]))))
    await run.wait_event("reply")
    return str(run.replies_to(int(message["id"]))[0]["content"])


async def test_a_mentioned_png_reaches_the_model_as_an_image_block(tmp_path: Path) -> None:
    png = tiny_png()
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        sent = run.say(
            w.general_id,
            w.alice_id,
            f"{run.mention()} what is in this screenshot?",
            attachments=[{"filename": "screen.png", "data": png}],
        )
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        (image,) = blocks(call, "image")
        assert image["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png).decode(),
        }
        assert "what is in this screenshot?" in prompt_text(call)
        assert "I see 1 image" in reply
        # Fetched from where Discord said it was, without the bot token.
        (fetch,) = run.sim.attachment_requests
        assert fetch.path.endswith("/screen.png")
        assert "authorization" not in fetch.headers


async def test_a_sixth_image_and_a_six_mb_file_are_named_not_sent(tmp_path: Path) -> None:
    images = [{"filename": f"{n}.png", "data": tiny_png(rgb=(n, n, n))} for n in range(6)]
    big = {"filename": "huge.png", "size": 6 * MB}
    # Says 1000 bytes, serves 6 MB: the download stops at the cap.
    liar = {"filename": "liar.png", "size": 1000, "data": tiny_png() + b"\0" * (6 * MB)}
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        sent = run.say(
            w.general_id,
            w.alice_id,
            f"{run.mention()} compare these",
            attachments=[*images, big],
        )
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        assert len(blocks(call, "image")) == 5
        text = prompt_text(call)
        assert (
            f"- 5.png (image/png, {len(tiny_png(rgb=(5, 5, 5)))} bytes): at most 5 images are sent"
            in text
        )
        assert "- huge.png (image/png, 6.0 MB): larger than 5.0 MB" in text
        assert "I see 5 images" in reply
        fetched = [r.path.rsplit("/", 1)[-1] for r in run.sim.attachment_requests]
        assert "huge.png" not in fetched  # its declared size already rules it out
        assert "5.png" not in fetched
        # A file larger than it said is cut off at the cap and named instead.
        run.sim.model.calls.clear()
        sent = run.say(w.random_id, w.alice_id, f"{run.mention()} and this?", attachments=[liar])
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        assert blocks(call, "image") == []
        assert "- liar.png (image/png, 1000 bytes): too large" in prompt_text(call)
        assert "I see" not in reply


async def test_a_file_on_a_host_that_is_not_discords_is_never_fetched(tmp_path: Path) -> None:
    seen: list[HttpRequest] = []

    async def elsewhere(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse(200, tiny_png(), (("Content-Type", "image/png"),))

    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run, trio.open_nursery() as n:
        port = await n.start(serve_http, elsewhere, "127.0.0.1", 0)
        w = run.world
        # The same machine under another name: not the API base's host.
        url = f"http://localhost:{port}/attachments/1/2/cat.png"
        sent = run.say(
            w.general_id,
            w.alice_id,
            f"{run.mention()} look",
            attachments=[{"filename": "cat.png", "url": url}],
        )
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        assert blocks(call, "image") == []
        assert "- cat.png (image/png" in prompt_text(call)
        assert "not on Discord's attachment hosts" in prompt_text(call)
        assert "I see" not in reply
        assert seen == []
        n.cancel_scope.cancel()


async def test_text_files_are_inlined_and_other_files_named_with_their_size(tmp_path: Path) -> None:
    source = "def add(a, b):\n    return a + b\n"
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        sent = run.say(
            w.general_id,
            w.alice_id,
            f"{run.mention()} review this",
            attachments=[
                {"filename": "add.py", "text": source},
                {"filename": "big.log", "text": "x" * (100 * 1024 + 1)},
                {"filename": "paper.pdf", "size": 2 * MB},
            ],
        )
        await answer_to(run, sent)
        text = prompt_text(run.sim.model.calls[0])
        assert f"File add.py:\n```\n{source.rstrip()}\n```" in text
        assert "- big.log (log, 100 KB): larger than 100 KB" in text
        assert "- paper.pdf (application/pdf, 2.0 MB)" in text
        assert "x" * 1000 not in text


async def test_recent_images_in_the_conversation_count_too(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, "my cat", attachments=["cat.png"])
        run.say(w.general_id, w.bob_id, "a stranger's", attachments=["other.png"])
        await trio.sleep(0.5)
        sent = run.say(w.general_id, w.alice_id, f"{run.mention()} what colour is the cat?")
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        assert len(blocks(call, "image")) == 1  # bob is not trusted: his image stays out
        assert "Image cat.png, sent by Alice earlier in the conversation:" in prompt_text(call)
        assert "I see 1 image" in reply


async def test_an_attachment_only_message_is_answered_only_in_always(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=NO_CONTINUATION) as run:
        w = run.world
        quiet = run.say(w.general_id, w.alice_id, "", attachments=["shot.png"])
        (decision,) = await run.wait_event("decision", message_id=int(quiet["id"]))
        assert decision["outcome"] == "skip"
        assert run.sim.model.calls == []
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention always")
        await run.wait_event("command")
        sent = run.say(w.general_id, w.alice_id, "", attachments=["shot.png"])
        reply = await answer_to(run, sent)
        (call,) = run.sim.model.calls
        # Its own image, and the one alice sent just before (recent images count too).
        assert len(blocks(call, "image")) == 2
        assert "I see 2 images" in reply


PERSONAS = {
    "agents.yaml": """
personas:
  - id: sleep
    name: Sleep Coach
    description: Helps people who sleep badly.
    domain_triggers: [sleep, slept, insomnia]
""",
}


async def test_a_persona_answer_sees_the_attached_image_too(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=NO_CONTINUATION, files=PERSONAS) as run:
        w = run.world
        run.say(
            w.general_id,
            w.alice_id,
            f"{run.mention()} this is my sleep tracker, why do I sleep so badly?",
            attachments=[{"filename": "tracker.png", "data": tiny_png()}],
        )
        (done,) = await run.wait_event("persona.responded")
        (call,) = run.sim.model.calls
        assert len(blocks(call, "image")) == 1
        assert "why do I sleep so badly?" in prompt_text(call)
        (answer,) = run.sim.bot_messages(int(done["thread_id"]))
        assert "I see 1 image" in answer["content"]
