"""The LLM actor: every model call goes through it (SPEC 9).

It owns the AsyncAnthropic client, routes tiers to models, enforces a deadline per call,
asks the budget before calling, prices each call from its `usage` and logs one `llm` event.
A call either returns the whole typed `Message` (`messages.create`) or streams its text as
it is written (`messages.create` with `stream=True`, SPEC 16); either way it is one request,
never retried. A call that was sent is paid for however it ends: answered, failed, cut, timed
out or cancelled (SPEC 9).
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import anthropic
import attrs
import trio

from picortex.actors.admission import Admission, ReservesAhead, gated
from picortex.actors.clients import FaultCheck
from picortex.actors.failures import failure_text
from picortex.config import ModelTiers, Price
from picortex.core import budget as budget_core
from picortex.core.budget import Refusal, Reservation
from picortex.core.llm import CallOutcome, ChatTurn, ContentPart, LLMRequest, LLMResult, TextPart
from picortex.core.money import usd
from picortex.discord.http import Once, sent_trace, task_watch, when_sent
from picortex.errors import FaultInjected, StreamCut
from picortex.tls import tls_context
from picortex.types import EventSink

if TYPE_CHECKING:
    from anthropic.types import ContentBlockParam, ImageBlockParam, MessageParam

logger = logging.getLogger(__name__)

# The dearest built-in list price (Opus 5.5); charged when the price table is empty, so an
# unknown model can never look free to the budget.
FALLBACK_PRICE: Final = Price(4.0, 20.0)
# A streamed answer's deadline moves on while text arrives, up to this in all: a long answer
# the user is watching grow may take a few minutes; a stalled one still ends at `timeout`.
STREAM_MAX_SECONDS: Final = 300.0
# The model client's own HTTP limits. Calls run concurrently from every channel, but a bot
# has a handful in flight at once; a bounded pool keeps a runaway from opening thousands.
MODEL_MAX_CONNECTIONS: Final = 32
MODEL_MAX_KEEPALIVE: Final = 8
# An idle connection is dropped before a load balancer would drop it under us (~60 s).
MODEL_KEEPALIVE_EXPIRY: Final = 30.0
# Connecting takes well under a second; a streamed answer may pause between events (pings
# come every few seconds). The whole call's deadline is `LLMRequest.timeout` (fail_after).
MODEL_CONNECT_TIMEOUT: Final = 10.0
MODEL_READ_TIMEOUT: Final = 60.0


class Budget(Protocol):
    """The spending ceilings (SPEC 9): per workspace and period, all workspaces, per user.

    `reserve` runs before every call with the call's worst case and returns a reservation,
    or a refusal: then the implementation
    itself has emitted the `budget` event and its one warning line per period, since only it
    knows the spend and the ceilings, and the LLM actor makes no call and emits its `llm`
    event with outcome `budget`. `settle` runs exactly once after every reserved call, with
    its real cost: what a sent call cost however it ended, 0.0 for one never sent.
    """

    def reserve(
        self, workspace: str, user_id: int | None, worst_usd: float
    ) -> Reservation | Refusal | Awaitable[Reservation | Refusal]:
        """Hold `worst_usd` for a call, or refuse it with the limit it hit (or return an
        awaitable of either, for a budget that asks the cluster's database)."""
        ...

    def settle(self, held: Reservation, cost_usd: float) -> None:
        """Release a reservation made by `reserve` and record the real cost."""
        ...


def price_of(model: str, prices: Mapping[str, Price]) -> Price:
    """The model's price; a model without one costs as the dearest known model."""
    price = prices.get(model)
    if price is not None:
        return price
    if not prices:
        return FALLBACK_PRICE
    return max(prices.values(), key=lambda p: (p.input + p.output, p.output))


def usage_tokens(usage: Any) -> tuple[int, int]:
    """Input and output tokens of a response's `usage` (the SDK's Usage object).

    Cache writes and reads count as input tokens at the input price: picortex does not ask
    for prompt caching, so they are rare, and this errs on the side of the budget.
    """
    if usage is None:
        return 0, 0
    input_tokens = _count(usage, "input_tokens")
    input_tokens += _count(usage, "cache_creation_input_tokens")
    input_tokens += _count(usage, "cache_read_input_tokens")
    return input_tokens, _count(usage, "output_tokens")


def _count(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@attrs.frozen
class ModelAnswer:
    """What a Messages API response says: its text blocks joined, and its token usage."""

    text: str
    input_tokens: int
    output_tokens: int


@attrs.define
class CallUsage:
    """What one call has run up so far, kept outside the call so it survives a cancellation.

    `sent` turns True when the HTTP request starts towards the model endpoint; the token
    counts are the usage the endpoint reported, as it reported it (a stream reports its
    input at `message_start`).
    """

    sent: bool = False
    input_tokens: int = 0
    output_tokens: int = 0

    def started(self) -> None:
        """The HTTP request towards the model endpoint started (the client's request hook):
        the call is paid for from here on."""
        self.sent = True

    @property
    def reported(self) -> bool:
        """True once the endpoint reported any usage."""
        return bool(self.input_tokens or self.output_tokens)


TextSink = Callable[[str], None]
# Told the whole answer at `message_stop`; what it returns, if anything, is awaited before
# the call reads its response out and is settled and logged.
EndSink = Callable[[str], Awaitable[None] | None]


async def _trace_sent(request: Any) -> None:
    """The model client's request hook: tell the task's `when_sent` watch (the model call
    being made, see `LLMActor.complete`) that its request starts, and have `on_sent` traced."""
    watch = task_watch()
    if watch is None:
        return
    if watch.admit is not None:
        # Not a byte before the call is admitted (a cluster's reservation, asked for meanwhile).
        await watch.admit()
    if watch.on_start is not None:
        watch.on_start()
    if watch.on_sent is not None:
        request.extensions = {**request.extensions, **sent_trace(watch.on_sent)}


def message_text(message: Any) -> str:
    """The text blocks of a typed `Message`, joined (tool use and thinking are left out)."""
    return "".join(
        block.text for block in message.content if getattr(block, "type", None) == "text"
    )


def _content_param(part: ContentPart) -> ContentBlockParam:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    image: ImageBlockParam = {
        "type": "image",
        "source": {"type": "base64", "media_type": cast(Any, part.media_type), "data": part.data},
    }
    return image


def _message_param(turn: ChatTurn) -> MessageParam:
    content: Any = (
        turn.content
        if isinstance(turn.content, str)
        else [_content_param(part) for part in turn.content]
    )
    if turn.role == "user":
        return {"role": "user", "content": content}
    return {"role": "assistant", "content": content}


class LLMActor:
    """The one LLM actor. `run` owns the client; `complete` may be called from any task.

    Calls run in the caller's task, concurrently, over the shared client: a caller that
    is cancelled (a follow-up restarting generation) aborts its own HTTP request and
    nothing else. `complete` never raises except for cancellation. A call made while the
    actor restarts waits for it, within the call's deadline.
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        models: ModelTiers,
        prices: Mapping[str, Price],
        events: EventSink,
        budget: Budget | None = None,
        faults: FaultCheck | None = None,
        http_client_factory: Callable[[], Any] | None = None,
    ) -> None:
        """Set the actor up; nothing is opened before `run`.

        Args:
            http_client_factory: makes the AsyncClient handed to AsyncAnthropic as its
                `http_client` on each run (tests pass one with a mock transport); None means
                `default_http_client`. A factory, because closing the SDK client closes its
                HTTP client, and a restarted actor needs a fresh one.
        """
        self._api_key = api_key or None
        self._base_url = base_url
        self._models = models
        self._prices = prices
        self._events = events
        self._budget = budget
        # A budget that reserves while the request is built (a cluster's), else None.
        self._ahead = budget if isinstance(budget, ReservesAhead) else None
        self._faults = faults
        self._http_client_factory = http_client_factory
        self._client: anthropic.AsyncAnthropic | None = None
        self._ready = trio.Event()
        self._warned_no_key = False
        # An injected fault fails its call and then crashes run(), as a real bug in the
        # actor would, so the supervisor's handling of it can be tested (SPEC 12).
        self._fault: FaultInjected | None = None
        self._faulted = trio.Event()

    @property
    def available(self) -> bool:
        """False without an API key: every LLM step is skipped."""
        return self._api_key is not None

    def reconfigure(
        self, *, models: ModelTiers | None = None, prices: Mapping[str, Price] | None = None
    ) -> None:
        """Apply changed `[models]` or prices (runtime config) to later calls."""
        if models is not None:
            self._models = models
        if prices is not None:
            self._prices = prices

    def model_for(self, request: LLMRequest) -> str:
        """The model a request goes to: its own `model`, else its tier's."""
        if request.model:
            return request.model
        tier = request.tier or "general"
        return str(getattr(self._models, tier))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the client, serve until cancelled, then close it."""
        if self._api_key is None:
            if not self._warned_no_key:
                self._warned_no_key = True
                logger.warning(
                    "ANTHROPIC_API_KEY is not set: every LLM step is skipped "
                    "(commands, trust, routing and logging still work)"
                )
            task_status.started()
            await trio.sleep_forever()
        http = (self._http_client_factory or model_http_client)()
        hooks = http.event_hooks
        http.event_hooks = {**hooks, "request": [*hooks.get("request", ()), _trace_sent]}
        async with anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self._base_url,
            # Failed invocations are never retried (SPEC 9); the deadline is ours (fail_after).
            max_retries=0,
            # Anthropic's API reference authenticates with x-api-key; send it beside the
            # SDK's own Authorization header so any endpoint that follows the docs accepts us.
            default_headers={"x-api-key": self._api_key},
            http_client=http,
            **sdk_telemetry(os.environ),
        ) as client:
            self._client = client
            self._ready.set()
            try:
                task_status.started()
                await self._faulted.wait()
                fault, self._fault = self._fault, None
                self._faulted = trio.Event()
                assert fault is not None
                raise fault
            finally:
                # Calls that arrive while restarting wait (within their deadline) for the next run.
                self._client = None
                self._ready = trio.Event()

    async def complete(
        self,
        request: LLMRequest,
        *,
        on_text: TextSink | None = None,
        on_sent: Callable[[], None] | None = None,
        on_end: EndSink | None = None,
    ) -> LLMResult:
        """Make one model call and report it; see LLMResult for the outcomes.

        With `on_text` the answer is streamed: `on_text(text_so_far)` is called as text
        arrives (synchronously, so it must not block). A stream cut midway is a "cut"
        whose tokens so far are still paid for; what `on_text` last saw is what was written.
        A streamed call calls `on_end(text)` once the stream says the answer is whole
        (`message_stop`), before the response is closed and the call settled and logged,
        so the answer can be posted at once; an awaitable it returns is awaited first (the
        reply's post going out before that work). `on_sent` is called once, as soon as the
        request is written to the model endpoint (or when the call ends without that:
        refused, failed, not made), so work that can wait (the typing indicator) goes out
        behind the request instead of in front of it.

        A call that was sent is settled and logged however it ends, a cancelled one too
        (outcome "cancelled", before its cancellation goes on).
        """
        once = None if on_sent is None else Once(on_sent)
        call = CallUsage()
        try:
            with when_sent(once, on_start=call.started):
                return await self._complete(request, call, on_text, on_end)
        finally:
            if once is not None:
                once()

    async def _complete(
        self,
        request: LLMRequest,
        call: CallUsage,
        on_text: TextSink | None,
        on_end: EndSink | None,
    ) -> LLMResult:
        model = self.model_for(request)
        start = trio.current_time()
        if self._api_key is None:
            return self._finish(request, model, start, "no_key")
        price = price_of(model, self._prices)
        held: Reservation | None = None
        admission: Admission | None = None
        if self._budget is not None:
            worst = budget_core.worst_case_usd(request.prompt_chars, request.max_tokens, price)
            try:
                answer: Reservation | Refusal | None = None
                if self._ahead is not None:
                    # Its round trip overlaps the building of the request, which waits for it.
                    admission = Admission(
                        self._ahead.reserve_ahead(request.workspace, request.user_id, worst)
                    )
                else:
                    reserved = self._budget.reserve(request.workspace, request.user_id, worst)
                    if not isinstance(reserved, Reservation | Refusal):
                        reserved = await reserved  # a cluster's ceilings ask the database
                    answer = reserved
            except Exception as exc:  # a broken ledger must not spend money blindly: no call
                logger.exception("budget check failed for workspace %s", request.workspace)
                return self._finish(request, model, start, "error", failure=exc)
            if isinstance(answer, Refusal):
                return self._finish(
                    request, model, start, "budget", limit=answer.limit, notice=answer.notice
                )
            held = answer
        # Until the call ends otherwise, it is being cancelled (a follow-up, a shutdown).
        outcome: CallOutcome = "cancelled"
        response: ModelAnswer | None = None
        failure: BaseException | None = None
        try:
            with trio.fail_after(request.timeout) as deadline:
                if on_text is not None:
                    on_text = _moving_deadline(on_text, deadline, start, request.timeout)
                with gated(admission):
                    response = await self._call(request, model, call, on_text, on_end)
            outcome = "ok"
        except trio.TooSlowError as exc:
            outcome, failure = "timeout", exc
        except StreamCut as exc:
            outcome, failure = "cut", exc
        except Exception as exc:
            # Every failure is reported, never retried (SPEC 9).
            outcome, failure = "error", exc
            if isinstance(exc, FaultInjected) and self._fault is None:
                self._fault = exc
                self._faulted.set()
        finally:
            # Settled and logged however the call ends, before a cancellation goes on: no
            # checkpoint in here, so nothing can interrupt it.
            if admission is not None:
                held = admission.pending.held()
            if admission is None or not admission.cut:
                result = self._paid(request, model, price, held, call, start, outcome, failure)
        if admission is not None and admission.cut:
            return self._not_admitted(request, model, start, admission)
        if response is not None:
            result = attrs.evolve(result, text=response.text)
        return result

    def _not_admitted(
        self, request: LLMRequest, model: str, start: float, admission: Admission
    ) -> LLMResult:
        """A call stopped at its gate, unsent: refused by a ceiling, or the budget failed."""
        pending = admission.pending
        if pending.failure is not None:
            logger.error(
                "budget check failed for workspace %s",
                request.workspace,
                exc_info=pending.failure,
            )
            return self._finish(request, model, start, "error", failure=pending.failure)
        refused = pending.verdict
        assert isinstance(refused, Refusal)
        return self._finish(
            request, model, start, "budget", limit=refused.limit, notice=refused.notice
        )

    def _paid(
        self,
        request: LLMRequest,
        model: str,
        price: Price,
        held: Reservation | None,
        call: CallUsage,
        start: float,
        outcome: CallOutcome,
        failure: BaseException | None,
    ) -> LLMResult:
        """Settle a call that was made (or tried) and log it: a sent call costs the usage the
        endpoint reported, else the input it was sent (SPEC 9); one never sent, nothing."""
        input_tokens, output_tokens = call.input_tokens, call.output_tokens
        estimated = call.sent and not call.reported
        if estimated:
            input_tokens = budget_core.worst_input_tokens(request.prompt_chars)
        cost = price.cost(input_tokens, output_tokens) if call.sent else 0.0
        self._settle(held, cost)
        return self._finish(
            request,
            model,
            start,
            outcome,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
            failure=failure,
            estimated=estimated,
        )

    def _settle(self, held: Reservation | None, cost: float) -> None:
        if self._budget is None or held is None:
            return
        try:
            self._budget.settle(held, cost)
        except Exception:  # the answer is paid for already; losing it helps nobody
            logger.exception("could not settle a budget reservation (cost %s)", usd(cost))

    async def _call(
        self,
        request: LLMRequest,
        model: str,
        call: CallUsage,
        on_text: TextSink | None,
        on_end: EndSink | None = None,
    ) -> ModelAnswer:
        """Make the request; the usage the endpoint reports is kept in `call` as it comes."""
        if self._client is None:
            await self._ready.wait()
        client = self._client
        if client is None:
            raise RuntimeError("the LLM client closed while the call was waiting for it")
        if self._faults is not None:
            last = request.messages[-1].text if request.messages else ""
            self._faults.check("llm", last)
        messages = [_message_param(turn) for turn in request.messages]
        system: Any = request.system if request.system else anthropic.NOT_GIVEN
        if on_text is None:
            message = await client.messages.create(
                model=model, max_tokens=request.max_tokens, messages=messages, system=system
            )
            call.input_tokens, call.output_tokens = usage_tokens(message.usage)
            return ModelAnswer(message_text(message), call.input_tokens, call.output_tokens)
        # The raw event stream, not the `messages.stream` helper: the answer needs only the
        # text deltas and the usage counts, not a Message snapshot rebuilt at every event.
        return await _stream(
            await client.messages.create(
                model=model,
                max_tokens=request.max_tokens,
                messages=messages,
                system=system,
                stream=True,
            ),
            call,
            on_text,
            on_end,
        )

    def _finish(
        self,
        request: LLMRequest,
        model: str,
        start: float,
        outcome: CallOutcome,
        *,
        text: str = "",
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float = 0.0,
        failure: BaseException | None = None,
        limit: str | None = None,
        notice: str | None = None,
        estimated: bool = False,
    ) -> LLMResult:
        latency_ms = round((trio.current_time() - start) * 1000)
        error: str | None = None
        stack: str | None = None
        if failure is not None:
            error, stack = failure_text(failure)
            if outcome == "timeout":
                error = f"no answer within {request.timeout:g} s"
        fields: dict[str, object] = {
            "model": model,
            "stage": request.stage,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": cost,
            "latency_ms": latency_ms,
            "outcome": outcome,
            "workspace": request.workspace,
        }
        if request.persona is not None:
            fields["persona"] = request.persona
        if request.signal_id is not None:
            fields["signal_id"] = request.signal_id
        if request.user_id is not None:
            fields["user_id"] = request.user_id
        if limit is not None:
            fields["limit"] = limit
        if error is not None:
            fields["error"] = error
        if estimated:
            # Sent, but no usage came back: charged for the input it was sent (SPEC 9).
            fields["usage"] = "estimated"
        self._events.emit("llm", **fields)
        return LLMResult(
            text=text,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
            latency_ms=latency_ms,
            outcome=outcome,
            error=error,
            stack_trace=stack,
            limit=limit,
            notice=notice,
        )


def _moving_deadline(
    on_text: TextSink, deadline: trio.CancelScope, start: float, timeout: float
) -> TextSink:
    """`on_text` that also moves a streamed call's deadline while text keeps arriving.

    The user watches a streamed answer grow, so a long one may take longer than `timeout`;
    a stall of `timeout` still ends it, and no call outlives STREAM_MAX_SECONDS.
    """
    cap = start + max(timeout, STREAM_MAX_SECONDS)

    def report(text: str) -> None:
        deadline.deadline = max(deadline.deadline, min(cap, trio.current_time() + timeout))
        on_text(text)

    return report


async def _stream(
    events: Any, call: CallUsage, on_text: TextSink, on_end: EndSink | None = None
) -> ModelAnswer:
    """Read one event stream to its `message_stop`, reporting the text as it grows, and the
    whole answer to `on_end` at `message_stop`.

    The usage is kept in `call` as each event reports it, so a stream cancelled or timed
    out midway is still paid for. The answer is whole at `message_stop`: a failure after it
    (reading the rest of the response, closing it) costs nothing of it.

    Raises:
        StreamCut: the stream failed or ended before `message_stop`.
    """
    text = ""
    stopped = False
    try:
        async with events as stream:
            reader = aiter(stream)
            try:
                async for event in reader:
                    kind = event.type
                    if kind == "content_block_delta" and event.delta.type == "text_delta":
                        text += event.delta.text
                        on_text(text)
                    elif kind == "message_start":
                        call.input_tokens, call.output_tokens = usage_tokens(event.message.usage)
                    elif kind == "message_delta":
                        # Cumulative counts (Anthropic's streaming docs); input may be restated.
                        delta_in, delta_out = usage_tokens(event.usage)
                        call.input_tokens = max(call.input_tokens, delta_in)
                        call.output_tokens = max(call.output_tokens, delta_out)
                    elif kind == "message_stop":
                        stopped = True
                        if on_end is not None:
                            pending = on_end(text)
                            if pending is not None:
                                await pending
            finally:
                await _end_read(reader)
    except Exception as exc:
        if stopped:
            logger.debug("the model's response failed after message_stop: %s", exc)
            return ModelAnswer(text, call.input_tokens, call.output_tokens)
        if not text and not call.reported:
            raise  # nothing was generated: an ordinary failed call
        reason = f"{type(exc).__name__}: {exc}"
        raise StreamCut(reason, text, call.input_tokens, call.output_tokens) from exc
    if not stopped:
        raise StreamCut("it ended before message_stop", text, call.input_tokens, call.output_tokens)
    return ModelAnswer(text, call.input_tokens, call.output_tokens)


async def _end_read(reader: AsyncIterator[Any]) -> None:
    """End a read of the SDK's event stream that stopped at an event (a cancellation or a
    failure while the answer was being posted or shown), so that none of its generators is
    left for the garbage collector.

    The SDK's iterators (its stream's, the SSE decoder's, the HTTP response's) each read the
    next one with `async for`, which never closes what it reads from: closing the outermost
    would leave the others. Read on under a cancelled scope instead: the first wait for the
    network raises `Cancelled` in the innermost, and it runs out through every one of them,
    each closing what it holds (the response too). A read that ran to its end, or that
    failed inside the SDK, is over already, and this costs nothing.
    """
    with trio.CancelScope(shield=True) as scope:
        scope.cancel()
        try:
            async for _ in reader:
                pass  # events still buffered: the answer has what it needs
        except Exception as exc:
            logger.debug("the model's abandoned response ended with %s", type(exc).__name__)


def sdk_httpx() -> ModuleType:
    """The httpx package the model SDK is built on (it may ship its own copy)."""
    base = anthropic.DefaultAsyncHttpxClient
    return sys.modules[base.__mro__[1].__module__.partition(".")[0]]


# Where OpenTelemetry is configured: its own variables, and the SDK's for its spans.
_TELEMETRY_ENV_PREFIXES: Final = ("OTEL_", "ANTHROPIC_OPEN_TELEMETRY")


def sdk_telemetry(environ: Mapping[str, str]) -> dict[str, Any]:
    """The SDK client's OpenTelemetry option: off unless the environment configures it.

    The SDK opens a span and injects trace headers on every call (about 0.1 ms of CPU each),
    which do nothing until a tracer is configured. picortex configures none itself, so only
    the environment can: with none of those variables set, turning them off loses nothing.
    With any set, the SDK's own defaults (and those variables) apply.
    """
    if any(name.startswith(_TELEMETRY_ENV_PREFIXES) for name in environ):
        return {}
    if "open_telemetry" not in inspect.signature(anthropic.AsyncAnthropic).parameters:
        return {}  # an SDK from before its OpenTelemetry support
    return {"open_telemetry": {"traces": False, "propagation": False}}


def model_http_client(transport: Any = None) -> Any:
    """The SDK's own HTTP client, tuned: bounded pool, our timeouts, no redirects.

    Redirects are never followed: a 30x from the model endpoint is an error, so the API
    key never travels to another origin. Proxies come from the environment (`trust_env`,
    the SDK's own handling), so there is one code path with or without one. `transport`
    is for tests only.
    """
    http = sdk_httpx()
    extra: dict[str, Any] = {} if transport is None else {"transport": transport}
    return anthropic.DefaultAsyncHttpxClient(
        limits=http.Limits(
            max_connections=MODEL_MAX_CONNECTIONS,
            max_keepalive_connections=MODEL_MAX_KEEPALIVE,
            keepalive_expiry=MODEL_KEEPALIVE_EXPIRY,
        ),
        timeout=http.Timeout(MODEL_READ_TIMEOUT, connect=MODEL_CONNECT_TIMEOUT),
        follow_redirects=False,
        verify=tls_context(),
        **extra,
    )
