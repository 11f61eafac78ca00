"""One discriminator classification (SPEC 7): the model request and how its result decides.

The channel actor, the panel's and the CLI's test runs all build their request here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import attrs

from picortex.core import discriminator as disc
from picortex.core.attention import AttentionDecision
from picortex.core.llm import ChatTurn, LLMRequest, LLMResult
from picortex.core.money import usd
from picortex.types import Message, Snowflake

# Cached messages searched for the ones before the message being classified: newer ones may
# be cached already when the channel is busy, and must not crowd the history out.
HISTORY_SCAN: Final = 200


def history_before(
    cached: Sequence[Message],
    message: Message,
    n: int,
    trusted: Callable[[Snowflake], bool],
) -> list[disc.HistoryLine]:
    """The last `n` of `cached` (oldest first) that came before `message`; `trusted` tells
    whose lines go unmarked."""
    if n <= 0:
        return []
    earlier = [m for m in cached if m.id < message.id]
    return [
        disc.HistoryLine(m.author.display_name, m.text, trusted(m.author.id)) for m in earlier[-n:]
    ]


@attrs.frozen
class Classifier:
    """How one chat's messages are classified (`Settings.classifier` reads it).

    Attributes:
        model: the chat's own discriminator model, else the configured one.
        input_usd, output_usd: the model's prices per million tokens.
        timeout_seconds: the deadline of one classification.
        history: earlier messages shown with the one classified.
    """

    model: str
    input_usd: float
    output_usd: float
    timeout_seconds: float
    history: int


def build_request(
    classifier: Classifier,
    template: str,
    message: Message,
    history: Sequence[disc.HistoryLine],
    chat: disc.ChatMeta,
    workspace: str,
) -> LLMRequest:
    """The capped prompt for `message` as an LLM request of stage `discriminate`.

    Raises:
        PromptTooLarge: no prompt fits the $0.001 budget at the model's prices; the caller
            fails open or closed as for any unavailable model.
    """
    model_name = classifier.model
    max_chars = disc.max_prompt_chars(
        classifier.input_usd, classifier.output_usd, disc.MAX_OUTPUT_TOKENS
    )
    if max_chars == 0:
        raise disc.PromptTooLarge(
            f"{model_name} costs more than {usd(disc.CLASSIFICATION_BUDGET_USD)} per "
            "classification at the configured prices; choose a cheaper discriminator model"
        )
    prompt = disc.render_prompt(
        template,
        history=history,
        message=(message.author.display_name, message.text),
        chat=chat,
        max_chars=max_chars,
    )
    return LLMRequest(
        stage="discriminate",
        system="",
        messages=(ChatTurn("user", prompt),),
        workspace=workspace,
        tier=None,
        model=model_name,
        max_tokens=disc.MAX_OUTPUT_TOKENS,
        timeout=classifier.timeout_seconds,
        signal_id=str(message.id),
        # A classification counts against its author's per-user limits (SPEC 7).
        user_id=message.author.id,
    )


def trial_request(
    classifier: Classifier,
    template: str,
    messages: Sequence[Message],
    index: int,
    *,
    chat_id: int,
    chat_name: str,
    trusted: Callable[[Snowflake], bool],
) -> LLMRequest | AttentionDecision:
    """The request that classifies `messages[index]` in an owner's test run (the panel's and
    `picortex discriminator test`), with the messages before it as history; or, when no
    prompt fits the budget, the decision the bot would take instead."""
    message = messages[index]
    is_dm = message.guild_id is None
    chat = disc.ChatMeta(
        chat_id=str(chat_id), kind="dm" if is_dm else "group", name=chat_name, bot_name="picortex"
    )
    history = history_before(messages[:index], message, classifier.history, trusted)
    workspace = "dm" if is_dm else str(message.guild_id)
    try:
        return build_request(classifier, template, message, history, chat, workspace)
    except disc.PromptTooLarge as exc:
        return disc.fail_decision(is_dm, f"discriminator prompt too large: {exc}")


def interpret(
    result: LLMResult, *, is_dm: bool, timeout_seconds: float, threshold: float | None = None
) -> AttentionDecision:
    """The decision for a classification's result (below the chat's confidence `threshold`
    the bot stays quiet); no verdict fails open in a DM, closed else."""
    if result.ok:
        return disc.decide_from_text(result.text, is_dm=is_dm, threshold=threshold)
    why = {
        "timeout": f"no answer within {timeout_seconds:g} s",
        "budget": "budget ceiling reached",
        "no_key": "no model key (ANTHROPIC_API_KEY is not set)",
    }.get(result.outcome, result.error or result.outcome)
    return disc.fail_decision(is_dm, f"discriminator unavailable: {why}")
