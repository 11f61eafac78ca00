"""The model tier of one answer (SPEC 18): `[models] route = "auto"` lets the request pick
`general` or `complex` (by rule, or with one triage call); `fixed` keeps today's tiers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from picortex.core import route
from picortex.core.budget import workspace_id
from picortex.core.llm import ChatTurn, LLMRequest
from picortex.types import Message

if TYPE_CHECKING:
    from picortex.actors.clients import CurrentSettings, ModelClient
    from picortex.types import EventSink

# A route call answers a few words; past this the answer goes on as `general`.
ROUTE_TIMEOUT_SECONDS: Final = 10.0
STAGE: Final = "route"  # the `llm` event's stage of a route call


class RouteClients(Protocol):
    """What choosing a tier uses."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force."""
        ...

    @property
    def llm(self) -> ModelClient:
        """The model."""
        ...

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...


async def answer_tier(
    clients: RouteClients, trigger: Message, text: str, persona_tier: str | None = None
) -> str:
    """The tier the answer to `text` goes to; with `auto` the choice and its reason are a
    `decision` event (outcome `route`).

    A persona that names its tier keeps it. A route call that fails, is refused or answers
    nothing usable leaves the answer on `general`; it counts against the author's per-user
    limits like a classification, and is not an error row (the answer goes on).
    """
    settings = clients.settings()
    if settings.models.route != "auto":
        return persona_tier or "general"
    if persona_tier is not None:
        tier, reason, by = persona_tier, f"the persona's tier is {persona_tier}", "persona"
    else:
        choice = route.by_rule(text) or await _ask(clients, trigger, text)
        tier, reason, by = choice.tier, choice.reason, choice.by
    clients.events.emit(
        "decision",
        message_id=trigger.id,
        channel_id=trigger.channel_id,
        guild_id=trigger.guild_id,
        author_id=trigger.author.id,
        outcome="route",
        reason=f"{tier}: {reason}",
        tier=tier,
        model=str(getattr(settings.models, tier)),
        routed_by=by,
    )
    return tier


async def _ask(clients: RouteClients, trigger: Message, text: str) -> route.RouteChoice:
    """One triage call judges the request."""
    settings = clients.settings()
    price = settings.price_for(settings.models.triage)
    prompt = route.route_prompt(text, price.input, price.output)
    if prompt is None:
        return route.fallback("the triage model is too dear for a route call under $0.001")
    result = await clients.llm.complete(
        LLMRequest(
            stage=STAGE,
            system=route.ROUTE_SYSTEM,
            messages=(ChatTurn("user", prompt),),
            workspace=workspace_id(trigger.guild_id),
            tier="triage",
            max_tokens=route.ROUTE_MAX_TOKENS,
            timeout=ROUTE_TIMEOUT_SECONDS,
            signal_id=str(trigger.id),
            user_id=trigger.author.id,
        )
    )
    if not result.ok:
        return route.fallback(f"route call {result.outcome}")
    return route.parse_route(result.text)
