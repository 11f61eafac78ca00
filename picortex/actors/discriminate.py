"""One discriminator classification (SPEC 7): the model request and how its result decides."""

from __future__ import annotations

from collections.abc import Sequence

from picortex.actors.llm import ChatTurn, LLMRequest, LLMResult
from picortex.config import Settings
from picortex.core import discriminator as disc
from picortex.core.attention import AttentionDecision
from picortex.types import Message


def build_request(
    settings: Settings,
    template: str,
    message: Message,
    history: Sequence[tuple[str, str]],
    chat: disc.ChatMeta,
    workspace: str,
) -> LLMRequest:
    """The capped prompt for `message` as an LLM request of stage `discriminate`."""
    price = settings.price_for(settings.discriminator.model)
    max_chars = disc.max_prompt_chars(price.input, price.output, disc.MAX_OUTPUT_TOKENS)
    prompt = disc.render_prompt(
        template,
        history=history,
        message=(message.author.display_name, message.content),
        chat=chat,
        max_chars=max_chars,
    )
    return LLMRequest(
        stage="discriminate",
        system="",
        messages=(ChatTurn("user", prompt),),
        workspace=workspace,
        tier=None,
        model=settings.discriminator.model,
        max_tokens=disc.MAX_OUTPUT_TOKENS,
        timeout=settings.discriminator.timeout_seconds,
        signal_id=str(message.id),
    )


def interpret(result: LLMResult, *, is_dm: bool, timeout_seconds: float) -> AttentionDecision:
    """The decision for a classification's result; no verdict fails open in a DM, closed else."""
    if result.ok:
        return disc.decide_from_text(result.text, is_dm=is_dm)
    why = {
        "timeout": f"no answer within {timeout_seconds:g} s",
        "budget": "budget ceiling reached",
        "no_key": "no model key (ANTHROPIC_API_KEY is not set)",
    }.get(result.outcome, result.error or result.outcome)
    return disc.fail_decision(is_dm, f"discriminator unavailable: {why}")
