"""`picortex discriminator test CHAT` and `picortex prompts history CHAT`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import trio

from picortex.actors.ledger import LedgerBudget
from picortex.actors.llm import LLMActor
from picortex.config import Settings
from picortex.core.attention import mode_for_chat
from picortex.core.discriminate import interpret, trial_request
from picortex.core.llm import LLMRequest
from picortex.core.money import usd
from picortex.core.terminal import clean_line
from picortex.core.trust import is_trusted
from picortex.errors import ConfigError
from picortex.files import private_dir
from picortex.store import AdminQueries
from picortex.store.backends import open_admin
from picortex.store.cache_files import decode_channel
from picortex.store.chathome import ChatHome, ChatHomeError
from picortex.types import Message, NullSink

PREVIEW_CHARS = 60  # of each message, so a decision stays one readable line


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


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def run_discriminator_test(
    settings: Settings,
    chat: str,
    n: int,
    *,
    out: TextIO,
    llm_http_client_factory: Callable[[], Any] | None = None,
) -> int:
    """Run the chat's discriminator on its last `n` cached user messages; print each decision.

    Each message is classified with the messages before it as history, exactly as the
    running bot would; messages by bots are history only. Calls are priced, recorded in the
    budget ledger and refused at the ceiling like the bot's own.

    Returns:
        0, or 1 when the chat has no cached messages.

    Raises:
        ConfigError: a bad CHAT or `-n`, an unreadable cache file or prompt.
    """
    chat_id = _chat_id(chat)
    if n < 1:
        raise ConfigError(f"-n must be at least 1, got {n}")
    messages = _cached_messages(settings, chat_id)
    picks = [i for i, m in enumerate(messages) if not m.author.bot][-n:]
    if not picks:
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
    private_dir(settings.home)
    store = open_admin(settings)
    try:
        live = settings.with_runtime(store.runtime_config())
        own = store.get_chat_config(chat_id)
        return _classify_all(
            live,
            store,
            messages,
            picks,
            template,
            chat_id=chat_id,
            own_mode=own.attention_mode if own is not None else None,
            own_model=own.discriminator_model if own is not None else None,
            own_threshold=own.discriminator_threshold if own is not None else None,
            prompt_path=str(home.prompt_path),
            out=out,
            llm_http_client_factory=llm_http_client_factory,
        )
    finally:
        store.close()


def _classify_all(
    settings: Settings,
    store: AdminQueries,
    messages: list[Message],
    picks: list[int],
    template: str,
    *,
    chat_id: int,
    own_mode: str | None,
    own_model: str | None,
    own_threshold: float | None,
    prompt_path: str,
    out: TextIO,
    llm_http_client_factory: Callable[[], Any] | None,
) -> int:
    last = messages[-1]
    is_dm = last.guild_id is None
    classifier = settings.classifier(own_model)
    mode = mode_for_chat(own_mode, None, is_dm, settings.attention)
    llm = LLMActor(
        api_key=settings.anthropic_api_key,
        base_url=settings.anthropic_base_url,
        models=settings.models,
        prices=settings.prices,
        events=NullSink(),
        budget=LedgerBudget(store, lambda: settings, NullSink()),
        http_client_factory=llm_http_client_factory,
    )
    print(
        f"Chat {chat_id} ({'direct message' if is_dm else 'group'}, attention mode {mode}); "
        f"model {classifier.model}; prompt {prompt_path}",
        file=out,
    )
    if not llm.available:
        print("(no ANTHROPIC_API_KEY: no call is made; each decision shows the fallback)", file=out)
    tiers = dict(store.trust_list())
    # Offline the bot's own id is unknown: its messages are the cached ones by a bot.
    bots = {m.author.id for m in messages if m.author.bot}

    def trusted(user_id: int) -> bool:
        return user_id in bots or is_trusted(user_id, settings.owner_id, tiers.get)

    total = 0.0
    calls = 0

    async def main() -> None:
        nonlocal total, calls
        async with trio.open_nursery() as nursery:
            await nursery.start(llm.run)
            for index in picks:
                msg = messages[index]
                line = f"{msg.author.display_name}: {_preview(msg.content)}"
                print(clean_line(line), file=out)
                request = trial_request(
                    classifier,
                    template,
                    messages,
                    index,
                    chat_id=chat_id,
                    chat_name=str(chat_id),
                    trusted=trusted,
                )
                if not isinstance(request, LLMRequest):
                    line = f"  -> {_verdict(request.outcome)}: {request.reason} ($0)"
                    print(clean_line(line), file=out)
                    continue
                # The owner's test run: charged to the workspace, not to the authors.
                result = await llm.complete(attrs.evolve(request, user_id=None))
                decision = interpret(
                    result,
                    is_dm=is_dm,
                    timeout_seconds=settings.discriminator.timeout_seconds,
                    threshold=own_threshold,
                )
                total += result.cost_usd
                calls += result.ok or result.failed
                line = (
                    f"  -> {_verdict(decision.outcome)}: {decision.reason} "
                    f"({usd(result.cost_usd)}, {result.input_tokens} in / "
                    f"{result.output_tokens} out tokens)"
                )
                print(clean_line(line), file=out)
            nursery.cancel_scope.cancel()

    trio.run(main)
    print(f"total cost: {usd(total)} for {calls} model calls", file=out)
    return 0


def _verdict(outcome: str) -> str:
    return "respond" if outcome == "respond" else "skip"


def run_prompts_history(settings: Settings, chat: str, *, out: TextIO) -> int:
    """Print the version history of the chat's discriminator prompt, newest first.

    Returns:
        0, or 1 when the chat has no prompt yet.
    """
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
        print(f"  {version.commit[:10]}  {version.date}  {version.message}", file=out)
    return 0


def command(args: argparse.Namespace) -> int:
    """`discriminator test CHAT [-n N]`."""
    from picortex.cli import common

    return run_discriminator_test(common.settings(), args.chat, args.n, out=sys.stdout)
