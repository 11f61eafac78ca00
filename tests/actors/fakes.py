"""Fakes of the narrow clients (`picortex.actors.clients`) shared by the actor tests."""

from __future__ import annotations

from typing import Any

from picortex.config import Settings
from picortex.store.seen import ANY_GUILD
from picortex.store.store import ChatConfig, UserAttention


class FakeSettings:
    """The settings in force, never refreshed from anywhere."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __call__(self) -> Settings:
        return self.settings

    def refresh(self, *, force: bool = False) -> Settings:
        return self.settings


class FakeStore:
    """The trust list and chat config in memory, every id unseen; writes recorded."""

    def __init__(self) -> None:
        self.tiers: dict[int, str] = {}
        self.chat_configs: dict[int, ChatConfig] = {}
        self.user_modes: dict[tuple[int, int], str] = {}  # (chat id, user id) -> own mode
        self.kept: list[int] = []  # ids kept for recall, in order
        self.noted: list[int] = []  # ids noted as seen, in order

    def get_tier(self, user_id: int) -> str | None:
        return self.tiers.get(user_id)

    def trust_list(self) -> list[tuple[int, str]]:
        return sorted(self.tiers.items())

    def get_chat_config(self, chat_id: int) -> ChatConfig | None:
        return self.chat_configs.get(chat_id)

    def get_user_attention(self, chat_id: int, user_id: int) -> str | None:
        return self.user_modes.get((chat_id, user_id))

    def user_attentions(self) -> list[UserAttention]:
        return [UserAttention(c, u, m, 0.0) for (c, u), m in sorted(self.user_modes.items())]

    def add_memory_message(self, message_id: int, **fields: Any) -> None:
        self.kept.append(message_id)

    def seen(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool | None:
        return False

    async def was_handled(self, message_id: int, guild_id: int | None = ANY_GUILD) -> bool:
        return False

    def note_seen(self, message_id: int) -> None:
        self.noted.append(message_id)
