"""`picortex discriminator test` and `picortex prompts history` against a cache file, a
chat home and a scripted model endpoint (a mock transport under the SDK)."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from picortex.cli.discriminator import run_discriminator_test, run_prompts_history
from picortex.config import Settings, load_settings
from picortex.core.budget import period_key
from picortex.errors import ConfigError
from picortex.store import Store
from picortex.store.cache_files import FILE_VERSION
from picortex.store.chathome import HAND_EDIT_MESSAGE, SEED_MESSAGE, ChatHome

try:  # the HTTP library the installed SDK is built on
    import httpx2 as sdk_http
except ImportError:  # pragma: no cover - older SDKs use httpx itself
    import httpx as sdk_http  # type: ignore[no-redef]

CHAT, GUILD, BOT, ALICE, BOB = 555, 77, 900, 1, 2
KEY = "sk-ant-test-key-0000"


def settings_for(home: Path, *, key: bool = True, toml: str = "") -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    if toml:
        (home / "picortex.toml").write_text(toml)
    env = {"PICORTEX_HOME": str(home)}
    if key:
        env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL="http://model.test")
    return load_settings(env)


def write_cache(
    settings: Settings, lines: list[tuple[int, str]], guild: int | None = GUILD
) -> None:
    """A channel file as the context cache writes it: (author index, text) per message."""
    users = [
        [ALICE, "alice", "Alice", False],
        [BOB, "bob", "Bob", False],
        [BOT, "picortex", None, True],
    ]
    messages = [
        {"id": 1000 + i, "author": author, "ts": "2026-04-12T10:00:00+00:00", "text": text}
        for i, (author, text) in enumerate(lines)
    ]
    doc = {
        "v": FILE_VERSION,
        "channel_id": CHAT,
        "guild_id": guild,
        "synced_to": None,
        "users": users,
        "messages": messages,
    }
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    (settings.cache_dir / f"{CHAT}.json").write_bytes(orjson.dumps(doc))


class Model:
    """The Messages API: answers from a script, records each request body."""

    def __init__(self, *answers: str | int) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        body = orjson.loads(request.content)
        self.bodies.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            error = {"type": "error", "error": {"type": "api_error", "message": "down"}}
            return sdk_http.Response(answer, json=error)
        return sdk_http.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": answer}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 300, "output_tokens": 20},
            },
        )

    def factory(self) -> Callable[[], Any]:
        return lambda: sdk_http.AsyncClient(transport=sdk_http.MockTransport(self))

    def prompt(self, index: int) -> str:
        return str(self.bodies[index]["messages"][0]["content"])


YES = '{"should_respond": true, "reason": "asks a question"}'
NO = '{"should_respond": false, "reason": "chatter"}'


def test_each_user_message_is_classified_with_what_came_before(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home")
    write_cache(
        settings, [(0, "morning"), (2, "Good morning!"), (1, "what is for lunch?"), (0, "pizza")]
    )
    model = Model(YES, NO)
    out = io.StringIO()
    before = datetime.now(UTC)
    assert (
        run_discriminator_test(
            settings, str(CHAT), 2, out=out, llm_http_client_factory=model.factory()
        )
        == 0
    )
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(
        f"Chat {CHAT} (group, attention mode mentions-only); model claude-haiku-5-5"
    )
    # 300 in / 20 out tokens at Haiku 5.5 prices (0.10 / 0.50 per million).
    assert lines[1:] == [
        "Bob: what is for lunch?",
        "  -> respond: discriminator: asks a question ($0.00004, 300 in / 20 out tokens)",
        "Alice: pizza",
        "  -> skip: discriminator: chatter ($0.00004, 300 in / 20 out tokens)",
        "total cost: $0.00008 for 2 model calls",
    ]
    # The bot's own message is history, never a message to classify.
    assert len(model.bodies) == 2
    # Nobody is on the trust list here: people's lines are marked, the bot's are not.
    assert 'untrusted "Alice": "morning"\n"picortex": "Good morning!"' in model.prompt(0)
    assert 'untrusted "Bob": "what is for lunch?"' in model.prompt(1)
    assert model.bodies[0]["max_tokens"] == 100
    # The chat home was created on first use; the spend went into the ledger.
    assert ChatHome(settings.home, str(CHAT)).exists()
    periods = {period_key(before, "day"), period_key(datetime.now(UTC), "day")}
    with Store.open(settings.db_path) as store:
        spent = sum(store.spend(str(GUILD), key) for key in periods)
    assert spent == pytest.approx(0.00008)


def test_a_dm_fails_open_and_a_group_closed_on_errors(tmp_path: Path) -> None:
    for guild, verdict in ((GUILD, "skip"), (None, "respond")):
        settings = settings_for(tmp_path / f"home-{verdict}")
        write_cache(settings, [(1, "hello?"), (1, "anyone?")], guild=guild)
        model = Model("not json at all", 500)
        out = io.StringIO()
        run_discriminator_test(
            settings, str(CHAT), 5, out=out, llm_http_client_factory=model.factory()
        )
        text = out.getvalue()
        where = "failing open in a direct message" if guild is None else "failing closed in a group"
        assert (
            f"  -> {verdict}: the discriminator's answer is not JSON: 'not json at all'; {where}"
            in text
        )
        assert f"  -> {verdict}: discriminator unavailable: InternalServerError" in text


def test_the_ceiling_is_respected(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home", toml="[budget]\nceiling_usd = 0.00001\n")
    write_cache(settings, [(1, "one?"), (1, "two?")])
    model = Model(YES, YES)
    out = io.StringIO()
    run_discriminator_test(settings, str(CHAT), 2, out=out, llm_http_client_factory=model.factory())
    assert len(model.bodies) == 1
    assert (
        "discriminator unavailable: budget ceiling reached; failing closed in a group ($0.00,"
        in out.getvalue()
    )
    assert out.getvalue().splitlines()[-1] == "total cost: $0.00004 for 1 model calls"


def test_runtime_config_applies(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home")
    with Store.open(settings.db_path) as store:
        store.set_runtime_config("discriminator.history", "1")
        store.set_attention_mode(CHAT, "discriminate", 0.0)
    write_cache(settings, [(0, "a1"), (0, "a2"), (1, "b?")])
    model = Model(YES)
    out = io.StringIO()
    run_discriminator_test(settings, str(CHAT), 1, out=out, llm_http_client_factory=model.factory())
    assert "attention mode discriminate" in out.getvalue()
    assert '"Alice": "a2"' in model.prompt(0) and '"Alice": "a1"' not in model.prompt(0)


def test_the_chats_threshold_applies(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home")
    with Store.open(settings.db_path) as store:
        store.set_discriminator(CHAT, None, 0.7, 0.0)
    write_cache(settings, [(1, "b?")])
    unsure = '{"should_respond": true, "reason": "asks", "confidence": 0.5}'
    out = io.StringIO()
    run_discriminator_test(
        settings, str(CHAT), 1, out=out, llm_http_client_factory=Model(unsure).factory()
    )
    assert "  -> skip: discriminator: confidence 0.5 is below the chat's threshold 0.7" in (
        out.getvalue()
    )


def test_without_a_key_no_call_and_the_fallback_shows(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home", key=False)
    write_cache(settings, [(1, "hello?")])
    out = io.StringIO()
    assert run_discriminator_test(settings, str(CHAT), 3, out=out) == 0
    text = out.getvalue()
    assert "(no ANTHROPIC_API_KEY: no call is made" in text
    assert (
        "  -> skip: discriminator unavailable: no model key (ANTHROPIC_API_KEY is not set)" in text
    )
    assert text.splitlines()[-1] == "total cost: $0.00 for 0 model calls"


def test_no_cache_and_bad_arguments(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home")
    out = io.StringIO()
    assert run_discriminator_test(settings, str(CHAT), 3, out=out) == 1
    assert f"No cached messages for chat {CHAT}" in out.getvalue()
    with pytest.raises(ConfigError, match="CHAT must be a Discord channel id"):
        run_discriminator_test(settings, "#general", 3, out=out)
    write_cache(settings, [(1, "hello?")])
    with pytest.raises(ConfigError, match="-n must be at least 1"):
        run_discriminator_test(settings, str(CHAT), 0, out=out)
    (settings.cache_dir / f"{CHAT}.json").write_text("{broken")
    with pytest.raises(ConfigError, match="the cache file is unreadable"):
        run_discriminator_test(settings, str(CHAT), 1, out=out)


def test_prompts_history_lists_versions_newest_first(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "home")
    out = io.StringIO()
    assert run_prompts_history(settings, str(CHAT), out=out) == 1
    assert "has no discriminator prompt yet" in out.getvalue()
    home = ChatHome(settings.home, str(CHAT))
    home.ensure()
    home.prompt_path.write_text(home.prompt_path.read_text() + "\nBe terse.\n")
    home.write_prompt("Only answer questions.\n{{message}}\n", "Set by the owner")
    out = io.StringIO()
    assert run_prompts_history(settings, str(CHAT), out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"{home.prompt_path}:"
    subjects = [line.split("  ")[-1] for line in lines[1:]]
    assert subjects == ["Set by the owner", HAND_EDIT_MESSAGE, SEED_MESSAGE]
    assert all(len(line.split()[0]) == 10 for line in lines[1:])
    with pytest.raises(ConfigError):
        run_prompts_history(settings, "../etc", out=out)
