"""The mode one author's message meets in a chat (SPEC 18): access rules, the author's own
mode (a thread's, else its parent channel's), then the chat's mode."""

from __future__ import annotations

from picortex.actors import chats
from picortex.config import AccessSettings, AttentionSettings
from picortex.store.store import ChatConfig
from picortex.types import Message, User
from tests.actors.fakes import FakeStore

GENERAL, THREAD, OTHER, GUILD = 10, 11, 12, 1
BOB = 7
DEFAULTS = AttentionSettings()
OPEN = AccessSettings()


class Parents:
    def parent_of(self, channel_id: int) -> int | None:
        return GENERAL if channel_id == THREAD else None


def message(channel_id: int, author: int = BOB) -> Message:
    return Message(1, channel_id, User(author, "bob"), "hi", "", guild_id=GUILD)


def choice(store: FakeStore, channel_id: int, access: AccessSettings = OPEN) -> chats.ModeChoice:
    return chats.mode_choice(store, Parents(), message(channel_id), DEFAULTS, access)


def test_the_chats_mode_applies_without_an_own_mode_or_access_rule() -> None:
    store = FakeStore()
    store.chat_configs[GENERAL] = ChatConfig(GENERAL, "discriminate", None, None, 0.0)
    assert choice(store, GENERAL) == chats.ModeChoice("discriminate")
    assert choice(store, THREAD) == chats.ModeChoice("discriminate")  # follows its parent
    assert choice(store, OTHER) == chats.ModeChoice("mentions-only")  # the group default


def test_an_own_mode_in_a_channel_covers_its_threads_unless_the_thread_has_one() -> None:
    store = FakeStore()
    store.user_modes[(GENERAL, BOB)] = "always"
    assert choice(store, GENERAL).mode == "always"
    assert choice(store, THREAD).mode == "always"
    assert choice(store, OTHER).mode == "mentions-only"
    store.user_modes[(THREAD, BOB)] = "silent"
    assert choice(store, THREAD).mode == "silent"
    other_user = chats.mode_choice(
        store, Parents(), message(GENERAL, 8), DEFAULTS, AccessSettings()
    )
    assert other_user.mode == "mentions-only"


def test_access_rules_beat_an_own_mode_and_follow_threads() -> None:
    store = FakeStore()
    store.user_modes[(GENERAL, BOB)] = "always"
    denied = choice(store, THREAD, AccessSettings(deny_channels=(GENERAL,)))
    assert denied.mode == "silent" and denied.blocked is not None
    assert "deny_channels" in denied.why
    limited = AccessSettings(allow_channels=(GENERAL,))
    assert choice(store, THREAD, limited).mode == "always"
    assert choice(store, OTHER, limited).mode == "silent"
