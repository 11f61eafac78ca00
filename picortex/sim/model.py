"""An offline, deterministic stand-in for Anthropic's Messages API (`POST /v1/messages`).

Answers with the Messages API's JSON shapes: a `message` object on success and Anthropic's
`{"type": "error", "error": {...}}` body on errors. Tests queue scripted replies
(`script`); otherwise the default answer is deterministic:

- a prompt that mentions `should_respond` gets `{"should_respond": ..., "reason": ...}`,
  true when the new message contains a question mark or the word "bot" (any case), false
  otherwise. The new message is the text after the last `New message:` label of the last
  user turn, up to the next blank line; without a label, that turn's last non-empty line;
- a prompt that asks for a persona id (mentions "persona" and "id") gets the first
  candidate: the first item of a `candidates: a, b` line, else the first word of the first
  bulleted or numbered line;
- a prompt that asks for a `"tier"` gets `{"tier": ..., "reason": ...}`: `complex` when the
  last user turn has the word "steps" or "complex" (any case), else `general`;
- anything else gets `(offline model) You said: <the last non-empty line of the last user
  turn>`, followed by the rest of the system prompt's `Sign off:` line when it has one (so
  an owner's prompt shows in the answer).

A request with `"stream": true` is answered with Server-Sent Events in the order Anthropic's
streaming docs give (message_start, content_block_start, ping, content_block_delta...,
content_block_stop, message_delta with the usage, message_stop). The pace is configurable
(`stream_pace` seconds between deltas of `stream_chunk_chars` characters, on trio's clock),
so tests can make slow streams; with no pace the whole stream goes out in one write. A
scripted reply may cut its stream midway (`cut_after`), by dropping the connection or, with
`stream_error`, by an `error` event.

A request carrying image blocks gets `(offline model) I see N image(s).` before its answer.

Token counts are estimates: input about len(system + messages text) / 4, output len(text) / 4;
with `worst_case_usage` set, every call reports its worst case instead (text / 3 in,
`max_tokens` out), so a benchmark can spend exactly what a budget reserved.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

import attrs
import orjson
import trio

from picortex.errors import CutConnection
from picortex.sim.httpserver import HttpRequest, HttpResponse

# Characters per token in the usage estimate.
CHARS_PER_TOKEN: Final = 4
# The fewest characters a token can be: the worst case (`worst_case_usage`) counts by it.
WORST_CHARS_PER_TOKEN: Final = 3
# The longest line the default answer quotes back.
QUOTE_MAX_CHARS: Final = 300
# A system prompt line the default answer ends with (`Sign off: -- Captain Pico`).
_SIGN_OFF: Final = re.compile(r"^[ \t]*Sign off:(.*)$", re.MULTILINE | re.IGNORECASE)
# Streamed answers: characters per text delta, and seconds between deltas by default.
STREAM_CHUNK_CHARS: Final = 24
STREAM_PACE_SECONDS: Final = 0.0
_COMPLEX_WORD: Final = re.compile(r"\b(steps|complex)\b", re.IGNORECASE)

_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_NEW_MESSAGE_LABEL = re.compile(r"new message\s*:?", re.IGNORECASE)
_BOT_WORD = re.compile(r"\bbot\b", re.IGNORECASE)
_CANDIDATES_LINE = re.compile(
    r"candidates?\s*(?:ids?)?\s*:\s*(\S.*)$", re.IGNORECASE | re.MULTILINE
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(\S.*)$", re.MULTILINE)
_ID_EDGES = "`'\"*,:;.()[]{}<>"


@attrs.frozen
class ModelReply:
    """One scripted answer.

    `text` None means the default answer; `status` other than 200 answers with Anthropic's
    error body (`error_type` defaults from the status); `delay` seconds pass first (on trio's
    clock), to provoke client timeouts. For a streamed request, `pace` (None: the model's
    default) is the seconds between text deltas of `chunk` characters (None: the model's
    default), and `cut_after` cuts the stream once that
    many characters were sent: the connection drops, or an `error` event of `stream_error`'s
    type is sent. `status` 30x answers a redirect to `location`.
    """

    text: str | None = None
    status: int = 200
    error_type: str | None = None
    error_message: str | None = None
    delay: float = 0.0
    stop_reason: str = "end_turn"
    input_tokens: int | None = None
    output_tokens: int | None = None
    pace: float | None = None
    chunk: int | None = None
    cut_after: int | None = None
    stream_error: str | None = None
    location: str = ""


@attrs.frozen
class ModelCall:
    """One request the endpoint received."""

    model: str | None
    system: Any
    messages: list[Any]
    max_tokens: int | None
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


class OfflineModel:
    """The `/v1/messages` endpoint: scripted replies first, then the default answer."""

    def __init__(self, notify: Callable[[], None] = lambda: None) -> None:
        self.calls: list[ModelCall] = []
        self._script: deque[ModelReply] = deque()
        self._count = 0
        self._notify = notify
        # Streamed answers: seconds between deltas and characters per delta (tests and the
        # demo slow streams down to show edits).
        self.stream_pace = STREAM_PACE_SECONDS
        self.stream_chunk_chars = STREAM_CHUNK_CHARS
        # Report every unscripted usage at a call's worst case (prompt characters / 3 in,
        # every allowed token out): what a budget ceiling must hold against.
        self.worst_case_usage = False

    def script(self, *replies: str | ModelReply) -> None:
        """Queue answers for the next calls, in order (a str is a plain text answer)."""
        for reply in replies:
            self._script.append(ModelReply(text=reply) if isinstance(reply, str) else reply)

    def clear_script(self) -> None:
        """Forget queued answers."""
        self._script.clear()

    @property
    def pending_script(self) -> int:
        """Scripted answers not yet used."""
        return len(self._script)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        """Serve one `/v1/messages` request."""
        self._count += 1
        request_id = "req_" + _digest(f"req{self._count}", 12)
        if request.method != "POST":
            return _error(
                405, "not_found_error", "Only POST is served on /v1/messages.", request_id
            )
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        if not key.strip():
            return _error(401, "authentication_error", "x-api-key header is required", request_id)
        if not request.headers.get("anthropic-version"):
            return _error(
                400, "invalid_request_error", "anthropic-version: header is required", request_id
            )
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return _error(
                400, "invalid_request_error", "Request body is not valid JSON.", request_id
            )
        problem = _validate(body)
        if problem is not None:
            return _error(400, "invalid_request_error", problem, request_id)
        self.calls.append(
            ModelCall(
                model=body.get("model"),
                system=body.get("system"),
                messages=list(body["messages"]),
                max_tokens=body.get("max_tokens"),
                body=body,
                headers=dict(request.headers),
                at=trio.current_time(),
            )
        )
        self._notify()
        reply = self._script.popleft() if self._script else ModelReply()
        if reply.delay > 0:
            await trio.sleep(reply.delay)
        if 300 <= reply.status < 400:
            return HttpResponse(
                reply.status, b"", (("location", reply.location), ("request-id", request_id))
            )
        if reply.status != 200:
            error_type = reply.error_type or _ERROR_TYPES.get(reply.status, "api_error")
            detail = reply.error_message or f"Simulated {error_type}."
            return _error(reply.status, error_type, detail, request_id)
        text = (
            reply.text
            if reply.text is not None
            else default_answer(body.get("system"), body["messages"])
        )
        prompt_chars = len(_text_of(body.get("system"))) + sum(
            len(_text_of(m.get("content"))) for m in body["messages"] if isinstance(m, dict)
        )
        input_tokens = reply.input_tokens
        if input_tokens is None:
            input_tokens = max(1, prompt_chars // CHARS_PER_TOKEN)
            if self.worst_case_usage:
                input_tokens = worst_input_tokens(body)
        output_tokens = reply.output_tokens
        if output_tokens is None:
            output_tokens = max(1, len(text) // CHARS_PER_TOKEN)
            if self.worst_case_usage:
                output_tokens = int(body["max_tokens"])
        if body.get("stream") is True:
            return self._stream(body, reply, text, input_tokens, output_tokens, request_id)
        answer = {
            "id": "msg_" + _digest(f"msg{self._count}", 12),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "service_tier": "standard",
            },
        }
        return HttpResponse.json(200, answer, (("request-id", request_id),))

    def _stream(
        self,
        body: dict[str, Any],
        reply: ModelReply,
        text: str,
        input_tokens: int,
        output_tokens: int,
        request_id: str,
    ) -> HttpResponse:
        """The answer as Server-Sent Events, paced on trio's clock."""
        message_id = "msg_" + _digest(f"msg{self._count}", 12)
        pace = self.stream_pace if reply.pace is None else reply.pace
        size = max(1, self.stream_chunk_chars if reply.chunk is None else reply.chunk)

        head = [
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": body["model"],
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                    },
                },
            ),
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": _EMPTY_TEXT},
            ),
            _sse("ping", {"type": "ping"}),
        ]
        shown = len(text) if reply.cut_after is None else min(len(text), reply.cut_after)
        deltas = [
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[at : min(at + size, shown)]},
                },
            )
            for at in range(0, shown, size)
        ]
        cut = shown < len(text)
        if not cut:
            tail = [
                _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                _sse(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                        "usage": {"output_tokens": output_tokens},
                    },
                ),
                _sse("message_stop", {"type": "message_stop"}),
            ]
        elif reply.stream_error is not None:
            error = {"type": reply.stream_error, "message": f"Simulated {reply.stream_error}."}
            tail = [_sse("error", {"type": "error", "error": error})]
        else:
            tail = []

        async def events() -> AsyncGenerator[bytes, None]:
            if pace > 0:
                yield b"".join(head)
                for delta in deltas:
                    await trio.sleep(pace)
                    yield delta
                if tail:
                    yield b"".join(tail)
            else:
                # Nothing to wait for: the events go out in one write, as a server flushing
                # an answer it already has would send them.
                yield b"".join([*head, *deltas, *tail])
            if cut and reply.stream_error is None:
                raise CutConnection

        headers = (
            ("Content-Type", "text/event-stream; charset=utf-8"),
            ("Cache-Control", "no-cache"),
            ("request-id", request_id),
        )
        return HttpResponse(200, b"", headers, stream=events)


_EMPTY_TEXT: Final = {"type": "text", "text": ""}


def _sse(event: str, data: object) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def image_count(messages: list[Any]) -> int:
    """Image blocks in the request's messages."""
    return sum(
        1
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    )


def default_answer(system: Any, messages: list[Any]) -> str:
    """The deterministic answer for a request without a scripted reply (see module doc)."""
    last_user = ""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            last_user = _text_of(message.get("content"))
    everything = "\n".join(
        [_text_of(system), *(_text_of(m.get("content")) for m in messages if isinstance(m, dict))]
    )
    lowered = everything.lower()
    if "should_respond" in lowered:
        new = _new_message(last_user)
        question = "?" in new
        bot = _BOT_WORD.search(new) is not None
        if question:
            reason = "(offline model) the new message asks a question"
        elif bot:
            reason = "(offline model) the new message mentions the bot"
        else:
            reason = "(offline model) no question and no mention of the bot"
        return orjson.dumps({"should_respond": question or bot, "reason": reason}).decode()
    if '"tier"' in lowered:
        hard = _COMPLEX_WORD.search(last_user) is not None
        tier, why = ("complex", "asks for steps") if hard else ("general", "a plain request")
        return orjson.dumps({"tier": tier, "reason": f"(offline model) {why}"}).decode()
    if "persona" in lowered and re.search(r"\bids?\b", lowered):
        candidate = _first_candidate(last_user) or _first_candidate(everything)
        if candidate:
            return candidate
    said = f"You said: {_last_line(last_user)[:QUOTE_MAX_CHARS]}"
    sign = _SIGN_OFF.search(_text_of(system))
    if sign is not None and sign.group(1).strip():
        said = f"{said} {sign.group(1).strip()[:QUOTE_MAX_CHARS]}"
    images = image_count(messages)
    if images:
        return f"(offline model) I see {images} image{'s' if images != 1 else ''}. {said}"
    return f"(offline model) {said}"


def worst_input_tokens(body: dict[str, Any]) -> int:
    """The most input tokens a request can be: its text characters / 3, rounded up.

    Text blocks count without separators, as a client reserving its worst case counts them.
    """
    chars = _chars_of(body.get("system")) + sum(
        _chars_of(m.get("content")) for m in body["messages"] if isinstance(m, dict)
    )
    return -(-chars // WORST_CHARS_PER_TOKEN)


def _chars_of(content: Any) -> int:
    if isinstance(content, list):
        return sum(
            len(str(b.get("text", ""))) if isinstance(b, dict) else len(str(b))
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    return len(_text_of(content))


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return str(content)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _new_message(text: str) -> str:
    labels = list(_NEW_MESSAGE_LABEL.finditer(text))
    if not labels:
        return _last_line(text)
    rest = text[labels[-1].end() :].lstrip(" \t").lstrip("\r\n")
    block = re.split(r"\n\s*\n", rest, maxsplit=1)[0]
    return block.strip()


def _first_candidate(text: str) -> str | None:
    line = _CANDIDATES_LINE.search(text)
    if line is not None:
        for token in re.split(r"[,\s]+", line.group(1)):
            cleaned = token.strip(_ID_EDGES)
            if cleaned:
                return cleaned
    item = _LIST_ITEM.search(text)
    if item is not None:
        cleaned = item.group(1).split()[0].strip(_ID_EDGES)
        if cleaned:
            return cleaned
    return None


def _validate(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "Request body must be a JSON object."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if "content" not in message:
            return f"messages.{index}.content: Field required"
        problem = _image_problem(index, message["content"])
        if problem is not None:
            return problem
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: Input should be a valid boolean"
    return None


_IMAGE_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _image_problem(index: int, content: Any) -> str | None:
    """What Anthropic would refuse in a message's image blocks (base64 sources only)."""
    if not isinstance(content, list):
        return None
    for number, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "image":
            continue
        where = f"messages.{index}.content.{number}.image.source"
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") != "base64":
            return f"{where}: Input should be a base64 image source"
        if source.get("media_type") not in _IMAGE_TYPES:
            return (
                f"{where}.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                "'image/gif' or 'image/webp'"
            )
        try:
            base64.b64decode(str(source.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            return f"{where}.base64.data: The image data is not valid base64"
    return None


def _error(status: int, error_type: str, message: str, request_id: str) -> HttpResponse:
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }
    headers: tuple[tuple[str, str], ...] = (("request-id", request_id),)
    if status in (429, 529):
        headers = (*headers, ("retry-after", "1"))
    return HttpResponse.json(status, body, headers)


def _digest(seed: str, size: int) -> str:
    return hashlib.blake2b(seed.encode(), digest_size=size).hexdigest()
