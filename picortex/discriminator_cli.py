"""`picortex discriminator test CHAT` and `picortex prompts history CHAT`."""

from __future__ import annotations

import logging
from typing import Any, TextIO

import trio

from picortex.actors.context_cache import decode_channel
from picortex.actors.discriminate import build_request, interpret
from picortex.actors.llm import LLMActor
from picortex.chathome import ChatHome, ChatHomeError
from picortex.config import Settings
from picortex.core import discriminator as disc
from picortex.errors import ConfigError
from picortex.types import Message, NullSink

logger = logging.getLogger(__name__)


def _chat_id(chat: str) -> int:
    if not chat.isdigit():
        raise ConfigError(f"CHAT must be a Discord channel id (digits), got {chat!r}")
    return int(chat)


def _cached_messages(settings: Settings, chat_id: int) -> list[Message]:
    path = settings.cache_dir / f"{chat_id}.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        return list(decode_channel(data, chat_id).messages)
    except Exception as exc:
        raise ConfigError(f"{path}: the cache file is unreadable ({exc})") from None


def run_discriminator_test(
    settings: Settings, chat: str, n: int, *, out: TextIO, llm_http_client_factory: Any = None
) -> int:
    """Run the chat's discriminator on its last `n` cached messages; print each decision."""
    chat_id = _chat_id(chat)
    if n < 1:
        raise ConfigError(f"-n must be at least 1, got {n}")
    messages = _cached_messages(settings, chat_id)
    if not messages:
        print(
            f"No cached messages for chat {chat_id} in {settings.cache_dir}: the cache fills "
            "while `picortex run` sees the chat.",
            file=out,
        )
        return 1
    home = ChatHome(settings.home, str(chat_id))
    try:
        template = home.read_prompt()
    except ChatHomeError as exc:
        raise ConfigError(str(exc)) from None
    is_dm = messages[-1].guild_id is None
    chat_meta = disc.ChatMeta(
        chat_id=str(chat_id),
        kind="dm" if is_dm else "group",
        name=str(chat_id),
        bot_name="picortex",
    )
    workspace = "dm" if is_dm else str(messages[-1].guild_id)
    llm = LLMActor(
        api_key=settings.anthropic_api_key,
        base_url=settings.anthropic_base_url,
        models=settings.models,
        prices=settings.prices,
        events=NullSink(),
        http_client_factory=llm_http_client_factory,
    )
    if not llm.available:
        print("(no ANTHROPIC_API_KEY: no call is made; each decision shows the fallback)", file=out)
    history_n = settings.discriminator.history
    total = 0.0

    async def main() -> None:
        nonlocal total
        async with trio.open_nursery() as nursery:
            await nursery.start(llm.run)
            start = max(0, len(messages) - n)
            for index in range(start, len(messages)):
                msg = messages[index]
                history = [
                    (m.author.display_name, m.content)
                    for m in messages[max(0, index - history_n) : index]
                ]
                try:
                    request = build_request(settings, template, msg, history, chat_meta, workspace)
                except disc.PromptTooLarge as exc:
                    raise ConfigError(f"{home.prompt_path}: {exc}") from None
                result = await llm.complete(request)
                decision = interpret(
                    result, is_dm=is_dm, timeout_seconds=settings.discriminator.timeout_seconds
                )
                total += result.cost_usd
                verdict = "respond" if decision.outcome == "respond" else "skip"
                text = msg.content.replace("\n", " ")[:60]
                print(f"{msg.author.display_name}: {text}", file=out)
                print(
                    f"  -> {verdict}: {decision.reason} "
                    f"(${result.cost_usd:.6f}, {result.input_tokens} in / "
                    f"{result.output_tokens} out tokens)",
                    file=out,
                )
            nursery.cancel_scope.cancel()

    trio.run(main)
    print(f"total cost: ${total:.6f}", file=out)
    return 0


def run_prompts_history(settings: Settings, chat: str, *, out: TextIO) -> int:
    """Print the version history of the chat's discriminator prompt."""
    chat_id = _chat_id(chat)
    home = ChatHome(settings.home, str(chat_id))
    if not home.exists():
        print(
            f"Chat {chat_id} has no discriminator prompt yet ({home.prompt_path} is created "
            "on first use).",
            file=out,
        )
        return 1
    try:
        versions = home.history()
    except ChatHomeError as exc:
        raise ConfigError(str(exc)) from None
    print(f"{home.prompt_path}:", file=out)
    for version in versions:
        print(f"  {version[0][:10]}  {version[1]}  {version[2]}", file=out)
    return 0
