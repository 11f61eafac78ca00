"""The offline model endpoint, driven by the official anthropic SDK."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import anthropic
import httpx
import orjson
import pytest
import trio
import trio.testing

from picortex.sim import ModelReply, Simulator, SimURLs, default_answer
from picortex.sim.httpserver import HttpRequest


@pytest.fixture
async def claude(urls: SimURLs) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        api_key="sk-test", base_url=urls.anthropic_base_url, max_retries=0
    ) as client:
        yield client


async def test_default_answer_has_the_messages_api_shape(
    claude: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    reply = await claude.messages.create(
        model="claude-sonnet-5-5",
        max_tokens=300,
        system="You are helpful.",
        messages=[{"role": "user", "content": "alice: hello there\nalice: how is the weather"}],
    )
    assert reply.type == "message"
    assert reply.role == "assistant"
    assert reply.model == "claude-sonnet-5-5"
    assert reply.stop_reason == "end_turn"
    assert reply.id.startswith("msg_")
    block = reply.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert block.text == "(offline model) You said: alice: how is the weather"
    assert reply.usage.input_tokens == (len("You are helpful.") + 44) // 4
    assert reply.usage.output_tokens == len(block.text) // 4
    call = sim.model.calls[-1]
    assert (call.model, call.system, call.max_tokens) == (
        "claude-sonnet-5-5",
        "You are helpful.",
        300,
    )
    assert call.messages[0]["role"] == "user"


async def test_raw_json_body_is_exactly_anthropics(urls: SimURLs) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            urls.anthropic_base_url + "/v1/messages",
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
    body = response.json()
    assert set(body) == {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    }
    assert body["content"] == [{"type": "text", "text": "(offline model) You said: hi"}]
    assert body["stop_sequence"] is None
    assert response.headers["request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("new_message", "expected"),
    [
        ("bob: is anyone around?", True),
        ("bob: hey Bot, wake up", True),
        ("bob: lunch was great", False),
        ("bob: robots are cool", False),
    ],
)
async def test_discriminator_default(
    claude: anthropic.AsyncAnthropic, new_message: str, expected: bool
) -> None:
    prompt = (
        "Recent messages, oldest first:\nalice: what? who is the bot?\n\n"
        f"New message:\n{new_message}\n\n"
        'Reply with one JSON object and nothing else:\n{"should_respond": true or false, '
        '"reason": "one short sentence"}'
    )
    reply = await claude.messages.create(
        model="claude-haiku-5-5", max_tokens=100, messages=[{"role": "user", "content": prompt}]
    )
    block = reply.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    verdict = orjson.loads(block.text)
    assert verdict["should_respond"] is expected
    assert verdict["reason"]


def test_route_default_answers_complex_for_steps() -> None:
    from picortex.core.route import ROUTE_SYSTEM, parse_route

    def tier(text: str) -> str:
        return parse_route(default_answer(ROUTE_SYSTEM, [{"role": "user", "content": text}])).tier

    assert tier('Request (30 characters): "list the STEPS to bake bread"') == "complex"
    assert tier('Request (20 characters): "plan a trip to Rome"') == "general"


def test_persona_pick_default() -> None:
    listed = (
        "Pick the persona for this message. Answer with the persona id only.\n"
        "- chef: food\n- sage: ideas"
    )
    assert default_answer(None, [{"role": "user", "content": listed}]) == "chef"
    inline = "Which persona id fits? candidates: `sage`, chef"
    assert default_answer(None, [{"role": "user", "content": inline}]) == "sage"


async def test_scripted_text_errors_and_delays(
    autojump_clock: trio.testing.MockClock, claude: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    sim.model.script(
        "scripted",
        ModelReply(status=529),
        ModelReply(status=400, error_message="bad prompt"),
        ModelReply(text="late", delay=30.0),
    )
    messages = [{"role": "user", "content": "hi"}]

    async def ask() -> str:
        reply = await claude.messages.create(model="m", max_tokens=10, messages=messages)
        block = reply.content[0]
        assert isinstance(block, anthropic.types.TextBlock)
        return block.text

    assert await ask() == "scripted"
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        await ask()
    assert overloaded.value.status_code == 529
    assert overloaded.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Simulated overloaded_error."},
        "request_id": overloaded.value.body["request_id"],  # type: ignore[index]
    }
    with pytest.raises(anthropic.BadRequestError) as bad:
        await ask()
    assert "bad prompt" in str(bad.value)
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(5):
            await ask()
    assert await ask() == "(offline model) You said: hi"
    assert len(sim.model.calls) == 5


async def test_bad_requests_get_anthropic_errors(urls: SimURLs) -> None:
    url = urls.anthropic_base_url + "/v1/messages"
    async with httpx.AsyncClient() as client:
        no_key = await client.post(url, json={})
        missing = await client.post(
            url,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"type": "base64", "media_type": "image/png", "data": "aGk="}, None),
        ({"type": "base64", "media_type": "image/bmp", "data": "aGk="}, "media_type"),
        ({"type": "base64", "media_type": "image/png", "data": "not base64!"}, "base64.data"),
        ({"type": "url", "url": "https://example.com/a.png"}, "base64 image source"),
    ],
)
async def test_image_blocks_are_checked_as_anthropic_does(
    urls: SimURLs, source: dict[str, str], problem: str | None
) -> None:
    content = [{"type": "image", "source": source}, {"type": "text", "text": "what is it?"}]
    async with httpx.AsyncClient() as client:
        response = await client.post(
            urls.anthropic_base_url + "/v1/messages",
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={
                "model": "m",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": content}],
            },
        )
    if problem is None:
        assert response.status_code == 200
        assert response.json()["content"][0]["text"].startswith("(offline model) I see 1 image.")
    else:
        assert response.status_code == 400
        assert problem in response.json()["error"]["message"]


async def test_a_streamed_answer_follows_anthropics_event_order(urls: SimURLs) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            urls.anthropic_base_url + "/v1/messages",
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={
                "model": "m",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [
        line.removeprefix("event: ")
        for line in response.text.splitlines()
        if line.startswith("event: ")
    ]
    deltas = events.count("content_block_delta")
    assert deltas >= 1
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert '"usage":{"output_tokens":' in response.text


async def _stream_parts(sim: Simulator, reply: ModelReply) -> list[bytes]:
    """The parts of a streamed answer to `reply`, as the HTTP server is handed them."""
    sim.model.script(reply)
    request = HttpRequest(
        method="POST",
        target="/v1/messages",
        path="/v1/messages",
        query={},
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        body=orjson.dumps(
            {
                "model": "m",
                "max_tokens": 50,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
        ),
    )
    response = await sim.model.handle(request)
    assert response.stream is not None
    return [part async for part in response.stream()]


async def test_an_unpaced_stream_is_one_part_and_a_paced_one_a_part_per_delta(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sim = Simulator()
    (whole,) = await _stream_parts(sim, ModelReply(text="abcdefgh", chunk=3, pace=0.0))
    assert whole.count(b"event: content_block_delta") == 3
    assert whole.rstrip().endswith(b'{"type":"message_stop"}')
    paced = await _stream_parts(sim, ModelReply(text="abcdefgh", chunk=3, pace=0.1))
    head, *deltas, tail = paced
    assert head.count(b"event: ") == 3  # message_start, content_block_start, ping
    assert [d.count(b"event: content_block_delta") for d in deltas] == [1, 1, 1]
    assert tail.count(b"event: ") == 3  # content_block_stop, message_delta, message_stop
    texts = re.compile(rb'"text_delta","text":"([^"]*)"')
    assert texts.findall(whole) == texts.findall(b"".join(deltas)) == [b"abc", b"def", b"gh"]


def test_the_default_answer_signs_off_as_the_system_prompt_says() -> None:
    turn = [{"role": "user", "content": "hello there"}]
    system = "You are Captain Pico.\nSign off: -- Captain Pico, at sea\nBe brief."
    assert default_answer(system, turn) == (
        "(offline model) You said: hello there -- Captain Pico, at sea"
    )
    assert default_answer("Be brief.", turn) == "(offline model) You said: hello there"


async def test_worst_case_usage_reports_text_over_three_in_and_max_tokens_out(
    claude: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    sim.model.worst_case_usage = True
    system = [{"type": "text", "text": "You are helpful."}, {"type": "text", "text": "Be brief."}]
    turn = [{"type": "text", "text": "alice: hello"}, {"type": "text", "text": "bob: hi"}]
    reply = await claude.messages.create(
        model="claude-sonnet-5-5",
        max_tokens=321,
        system=system,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": turn}],  # type: ignore[list-item]
    )
    chars = len("You are helpful.") + len("Be brief.") + len("alice: hello") + len("bob: hi")
    assert reply.usage.input_tokens == -(-chars // 3)
    assert reply.usage.output_tokens == 321
    sim.model.script(ModelReply(text="scripted", input_tokens=7, output_tokens=2))
    scripted = await claude.messages.create(
        model="claude-sonnet-5-5", max_tokens=321, messages=[{"role": "user", "content": "x"}]
    )
    assert (scripted.usage.input_tokens, scripted.usage.output_tokens) == (7, 2)
