"""Gateway and REST payloads into picortex's value types; junk into NormalizeError."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.discord.normalize import HANDLED_EVENTS, message_from_payload, normalize
from picortex.types import (
    REFERENCE_FORWARD,
    Attachment,
    ChannelCreate,
    ChannelDelete,
    ChannelType,
    GuildCreate,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageReference,
    MessageUpdate,
    NormalizeError,
    ReactionEvent,
    Ready,
    User,
)

GUILD = "81384788765712384"
CHANNEL = "290926798999357250"
ALICE = {
    "id": "53908232506183680",
    "username": "alice",
    "global_name": "Alice A.",
    "discriminator": "0",
    "avatar": None,
}
BOT = {"id": "1000000000000000001", "username": "picortex", "bot": True, "global_name": None}


def guild_message(**extra: Any) -> dict[str, Any]:
    """A MESSAGE_CREATE payload as Discord sends it in a guild channel."""
    payload: dict[str, Any] = {
        "id": "1100000000000000000",
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "author": ALICE,
        "member": {"roles": [], "joined_at": "2024-01-01T00:00:00+00:00"},
        "content": "hello <@1000000000000000001>",
        "timestamp": "2024-05-01T12:00:00.000000+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [{**BOT, "member": {"roles": []}}],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
    }
    payload.update(extra)
    return payload


# ---- messages ---------------------------------------------------------------------------------


def test_guild_message() -> None:
    message = normalize("MESSAGE_CREATE", guild_message())
    assert isinstance(message, Message)
    assert message.id == 1100000000000000000
    assert message.channel_id == int(CHANNEL)
    assert message.guild_id == int(GUILD)
    assert not message.is_dm
    assert message.author == User(53908232506183680, "alice", "Alice A.", False)
    assert message.author.display_name == "Alice A."
    assert message.content == "hello <@1000000000000000001>"
    assert message.timestamp == "2024-05-01T12:00:00.000000+00:00"
    assert message.mentions == (User(1000000000000000001, "picortex", None, True),)
    assert message.mentions_user(1000000000000000001)
    assert message.message_reference is None
    assert message.referenced_author is None
    assert message.type == 0


def test_dm_has_no_guild() -> None:
    payload = guild_message(mentions=[])
    del payload["guild_id"], payload["member"]
    message = normalize("MESSAGE_CREATE", payload)
    assert isinstance(message, Message)
    assert message.guild_id is None
    assert message.is_dm
    assert message.mentions == ()


def test_reply_carries_reference_and_replied_to_author() -> None:
    replied = guild_message(id="1099999999999999999", author=BOT, content="earlier")
    payload = guild_message(
        type=19,
        message_reference={
            "type": 0,
            "message_id": "1099999999999999999",
            "channel_id": CHANNEL,
            "guild_id": GUILD,
        },
        referenced_message=replied,
    )
    message = normalize("MESSAGE_CREATE", payload)
    assert isinstance(message, Message)
    assert message.type == 19
    assert message.message_reference == MessageReference(
        1099999999999999999, int(CHANNEL), int(GUILD)
    )
    assert message.referenced_author == User(1000000000000000001, "picortex", None, True)


def test_reply_to_a_deleted_message() -> None:
    payload = guild_message(type=19, message_reference={"message_id": "5"}, referenced_message=None)
    message = normalize("MESSAGE_CREATE", payload)
    assert isinstance(message, Message)
    assert message.message_reference == MessageReference(5)
    assert message.referenced_author is None


def test_attachments_roles_everyone_edits_and_webhooks() -> None:
    payload = guild_message(
        attachments=[
            {
                "id": "7",
                "filename": "cat.png",
                "size": 1234,
                "url": "https://cdn.example/cat.png",
                "proxy_url": "https://media.example/cat.png",
                "content_type": "image/png",
            }
        ],
        mention_roles=["42", "43"],
        mention_everyone=True,
        edited_timestamp="2024-05-01T12:01:00+00:00",
        webhook_id="99",
    )
    message = normalize("MESSAGE_CREATE", payload)
    assert isinstance(message, Message)
    assert message.attachments == (
        Attachment(7, "cat.png", 1234, "https://cdn.example/cat.png", "image/png"),
    )
    assert message.mention_roles == (42, 43)
    assert message.mention_everyone
    assert message.edited_timestamp == "2024-05-01T12:01:00+00:00"
    assert message.webhook_id == 99


def test_message_in_a_thread_keeps_the_thread_as_channel() -> None:
    message = normalize("MESSAGE_CREATE", guild_message(channel_id="1200000000000000000"))
    assert isinstance(message, Message)
    assert message.channel_id == 1200000000000000000


def test_history_message_takes_the_channels_guild() -> None:
    payload = guild_message()
    del payload["guild_id"]
    in_guild = message_from_payload(payload, guild_id=int(GUILD))
    assert isinstance(in_guild, Message)
    assert in_guild.guild_id == int(GUILD)
    dm = message_from_payload(payload)
    assert isinstance(dm, Message)
    assert dm.is_dm
    assert isinstance(message_from_payload({"id": "x"}), NormalizeError)


def test_message_update_keeps_only_what_was_sent() -> None:
    partial = {
        "id": "5",
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "content": "edited",
        "edited_timestamp": "t",
    }
    update = normalize("MESSAGE_UPDATE", partial)
    assert update == MessageUpdate(5, int(CHANNEL), int(GUILD), "edited", "t", None, None)
    full = normalize("MESSAGE_UPDATE", guild_message(content="new"))
    assert isinstance(full, MessageUpdate)
    assert full.content == "new"
    assert full.author == User(53908232506183680, "alice", "Alice A.", False)
    assert full.attachments == ()
    embed_only = normalize("MESSAGE_UPDATE", {"id": "5", "channel_id": CHANNEL})
    assert embed_only == MessageUpdate(5, int(CHANNEL))


def test_message_delete() -> None:
    assert normalize(
        "MESSAGE_DELETE", {"id": "5", "channel_id": "6", "guild_id": "7"}
    ) == MessageDelete(5, 6, 7)
    assert normalize("MESSAGE_DELETE", {"id": "5", "channel_id": "6"}) == MessageDelete(5, 6, None)


# ---- reactions --------------------------------------------------------------------------------


def test_reaction_add_with_unicode_emoji() -> None:
    payload = {
        "user_id": "11",
        "channel_id": "12",
        "message_id": "13",
        "guild_id": "14",
        "member": {"roles": []},
        "emoji": {"id": None, "name": "👍"},
        "burst": False,
        "type": 0,
    }
    assert normalize("MESSAGE_REACTION_ADD", payload) == ReactionEvent(True, 11, 12, 13, "👍", 14)


def test_reaction_remove_with_custom_emoji_in_a_dm() -> None:
    payload = {
        "user_id": "11",
        "channel_id": "12",
        "message_id": "13",
        "emoji": {"id": "77", "name": "blob"},
    }
    assert normalize("MESSAGE_REACTION_REMOVE", payload) == ReactionEvent(
        False, 11, 12, 13, "blob:77", None
    )


def test_reaction_without_any_emoji_name_is_junk() -> None:
    payload = {
        "user_id": "11",
        "channel_id": "12",
        "message_id": "13",
        "emoji": {"id": None, "name": None},
    }
    result = normalize("MESSAGE_REACTION_ADD", payload)
    assert isinstance(result, NormalizeError)
    assert "emoji" in result.reason


# ---- session and channels ---------------------------------------------------------------------


def test_ready() -> None:
    payload = {
        "v": 10,
        "user": BOT,
        "guilds": [{"id": GUILD, "unavailable": True}, {"id": "2", "unavailable": True}],
        "session_id": "abc123",
        "resume_gateway_url": "wss://gateway-resume.example",
        "shard": [0, 1],
        "application": {"id": "1", "flags": 0},
    }
    ready = normalize("READY", payload)
    assert ready == Ready(
        "abc123",
        "wss://gateway-resume.example",
        User(1000000000000000001, "picortex", None, True),
        (int(GUILD), 2),
        (0, 1),
        application_id=1,
    )


def test_ready_with_junk_application_is_still_ready() -> None:
    payload = {
        "user": BOT,
        "session_id": "abc",
        "resume_gateway_url": "wss://r.example",
        "application": {"id": "not-an-id"},
    }
    ready = normalize("READY", payload)
    assert isinstance(ready, Ready) and ready.application_id is None


def test_guild_create_fills_in_guild_ids_of_channels_and_threads() -> None:
    payload = {
        "id": GUILD,
        "name": "Friends",
        "unavailable": False,
        "member_count": 3,
        "channels": [
            {"id": "20", "type": 0, "name": "general", "parent_id": "19"},
            {"id": "19", "type": 4, "name": "Text", "parent_id": None},
        ],
        "threads": [
            {"id": "30", "type": 11, "guild_id": GUILD, "parent_id": "20", "name": "topic"}
        ],
    }
    guild = normalize("GUILD_CREATE", payload)
    assert isinstance(guild, GuildCreate)
    assert (guild.id, guild.name, guild.unavailable) == (int(GUILD), "Friends", False)
    general, category = guild.channels
    assert (general.id, general.guild_id, general.parent_id, general.name) == (
        20,
        int(GUILD),
        19,
        "general",
    )
    assert category.type == ChannelType.GUILD_CATEGORY
    (thread,) = guild.threads
    assert thread.is_thread
    assert (thread.id, thread.parent_id, thread.guild_id) == (30, 20, int(GUILD))


def test_unavailable_guild_create() -> None:
    assert normalize("GUILD_CREATE", {"id": "5", "unavailable": True}) == GuildCreate(
        5, "", unavailable=True
    )


def test_thread_create_and_channel_create() -> None:
    thread = normalize(
        "THREAD_CREATE",
        {
            "id": "30",
            "type": 11,
            "guild_id": GUILD,
            "parent_id": "20",
            "name": "topic",
            "newly_created": True,
        },
    )
    assert isinstance(thread, ChannelCreate)
    assert thread.channel.is_thread
    assert (thread.channel.id, thread.channel.parent_id, thread.channel.guild_id) == (
        30,
        20,
        int(GUILD),
    )
    channel = normalize("CHANNEL_CREATE", {"id": "21", "type": 0, "guild_id": GUILD, "name": "new"})
    assert isinstance(channel, ChannelCreate)
    assert not channel.channel.is_thread
    assert channel.channel.name == "new"


def test_unhandled_events_are_ignored() -> None:
    assert normalize("TYPING_START", {"channel_id": "1"}) is None
    assert normalize("PRESENCE_UPDATE", "junk") is None


# ---- junk -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "payload", "reason"),
    [
        ("MESSAGE_CREATE", None, "not an object"),
        ("MESSAGE_CREATE", [], "not an object"),
        ("MESSAGE_CREATE", {**guild_message(), "id": None}, "id"),
        (
            "MESSAGE_CREATE",
            {k: v for k, v in guild_message().items() if k != "channel_id"},
            "channel_id",
        ),
        ("MESSAGE_CREATE", guild_message(id="12ab"), "snowflake"),
        ("MESSAGE_CREATE", guild_message(id="-5"), "snowflake"),
        ("MESSAGE_CREATE", guild_message(id=True), "snowflake"),
        ("MESSAGE_CREATE", guild_message(id="9" * 30), "snowflake"),
        ("MESSAGE_CREATE", guild_message(content=5), "content"),
        ("MESSAGE_CREATE", guild_message(author="alice"), "author"),
        ("MESSAGE_CREATE", guild_message(author={"id": "1"}), "username"),
        ("MESSAGE_CREATE", guild_message(mentions="everyone"), "mentions"),
        ("MESSAGE_CREATE", guild_message(mentions=[None]), "mention"),
        ("MESSAGE_CREATE", guild_message(attachments=[{"filename": "x"}]), "id"),
        ("MESSAGE_CREATE", guild_message(referenced_message=[1]), "referenced_message"),
        ("MESSAGE_DELETE", {"id": "1"}, "channel_id"),
        (
            "MESSAGE_REACTION_ADD",
            {"user_id": "1", "channel_id": "2", "message_id": "3", "emoji": "x"},
            "emoji",
        ),
        ("READY", {"session_id": 5}, "session_id"),
        ("GUILD_CREATE", {"id": "1", "channels": {"a": 1}}, "channels"),
        ("THREAD_CREATE", {"id": "1", "type": "11"}, "type"),
    ],
)
def test_junk_becomes_a_normalize_error(event: str, payload: object, reason: str) -> None:
    result = normalize(event, payload)
    assert isinstance(result, NormalizeError)
    assert result.event == event
    assert reason in result.reason
    assert len(result.excerpt) < 400


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(event=st.sampled_from(sorted(HANDLED_EVENTS)), data=json_values)
def test_arbitrary_payloads_never_raise(event: str, data: object) -> None:
    result = normalize(event, data)
    assert result is not None


VALID: dict[str, Any] = {
    "MESSAGE_CREATE": guild_message(
        message_reference={"message_id": "5"},
        referenced_message=guild_message(id="5"),
        attachments=[{"id": "7", "filename": "a", "size": 1, "url": "u"}],
        mention_roles=["1"],
    ),
    "MESSAGE_UPDATE": guild_message(),
    "MESSAGE_DELETE": {"id": "1", "channel_id": "2", "guild_id": "3"},
    "MESSAGE_REACTION_ADD": {
        "user_id": "1",
        "channel_id": "2",
        "message_id": "3",
        "emoji": {"id": "4", "name": "x"},
    },
    "READY": {
        "user": BOT,
        "guilds": [{"id": "1"}],
        "session_id": "s",
        "resume_gateway_url": "u",
        "shard": [0, 1],
    },
    "GUILD_CREATE": {"id": "1", "name": "g", "channels": [{"id": "2", "type": 0}], "threads": []},
    "THREAD_CREATE": {"id": "1", "type": 11, "parent_id": "2", "guild_id": "3"},
}


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every key path into a JSON value."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@settings(max_examples=150, deadline=None)
@given(data=st.data(), junk=json_values)
def test_corrupting_any_field_of_a_valid_payload_never_raises(
    data: st.DataObject, junk: object
) -> None:
    event = data.draw(st.sampled_from(sorted(VALID)))
    payload = copy.deepcopy(VALID[event])
    path = data.draw(st.sampled_from(_paths(payload)))
    target: Any = payload
    for step in path[:-1]:
        target = target[step]
    if data.draw(st.booleans(), label="delete") and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = junk
    result = normalize(event, payload)
    assert result is not None
    if not isinstance(result, NormalizeError):
        assert type(result).__name__ in {
            "Message",
            "MessageUpdate",
            "MessageDelete",
            "ReactionEvent",
            "Ready",
            "GuildCreate",
            "ChannelCreate",
        }


@pytest.mark.parametrize("event", sorted(VALID))
def test_valid_fixtures_normalize(event: str) -> None:
    assert not isinstance(normalize(event, VALID[event]), NormalizeError)


def test_thread_update_and_list_sync_keep_threads_known() -> None:
    from picortex.types import ChannelCreate, ThreadListSync

    update = normalize(
        "THREAD_UPDATE",
        {"id": "30", "type": 11, "guild_id": "1", "parent_id": "2", "name": "t"},
    )
    assert isinstance(update, ChannelCreate)
    assert update.channel.is_thread and update.channel.parent_id == 2
    sync = normalize(
        "THREAD_LIST_SYNC",
        {"guild_id": "1", "threads": [{"id": "31", "type": 11, "parent_id": "2"}], "members": []},
    )
    assert isinstance(sync, ThreadListSync)
    assert sync.threads[0].id == 31 and sync.threads[0].guild_id == 1
    assert isinstance(normalize("THREAD_LIST_SYNC", {"threads": []}), NormalizeError)


# ---- what Discord nests in a message; bulk and channel deletes --------------------------------


def test_a_forward_carries_its_snapshot_text_and_files_marked_as_forwarded() -> None:
    payload = guild_message(
        content="",
        flags=1 << 14,
        message_reference={
            "type": 1,
            "message_id": "1099999999999999999",
            "channel_id": "290926798999357999",
            "guild_id": GUILD,
        },
        message_snapshots=[
            {
                "message": {
                    "type": 0,
                    "content": "the release is on friday",
                    "embeds": [],
                    "attachments": [
                        {"id": "1", "filename": "notes.txt", "size": 3, "url": "https://x"}
                    ],
                    "timestamp": "2024-05-01T11:00:00.000000+00:00",
                    "edited_timestamp": None,
                    "flags": 0,
                    "mentions": [],
                    "mention_roles": [],
                    "sticker_items": [{"id": "5", "name": "Party", "format_type": 1}],
                    "components": [],
                }
            }
        ],
    )
    msg = normalize("MESSAGE_CREATE", payload)
    assert isinstance(msg, Message)
    assert msg.message_reference is not None
    assert msg.message_reference.type == REFERENCE_FORWARD
    assert msg.content == ""
    assert msg.text == (
        "[forwarded message] the release is on friday [attachments: notes.txt] [sticker: Party]"
    )


def test_poll_question_and_answers_and_sticker_names_are_what_the_message_says() -> None:
    payload = guild_message(
        content="vote please",
        poll={
            "question": {"text": "Lunch?"},
            "answers": [
                {"answer_id": 1, "poll_media": {"text": "pizza"}},
                {"answer_id": 2, "poll_media": {"emoji": {"id": None, "name": "🍜"}}},
            ],
            "expiry": "2024-05-02T12:00:00.000000+00:00",
            "allow_multiselect": False,
            "layout_type": 1,
        },
        sticker_items=[{"id": "7", "name": "Wave", "format_type": 1}],
    )
    msg = normalize("MESSAGE_CREATE", payload)
    assert isinstance(msg, Message)
    assert msg.text == "vote please\n[poll] Lunch? (1) pizza (2) 🍜\n[sticker: Wave]"
    assert msg.content == "vote please"  # commands and mentions read the content alone


def test_member_nick_comes_first_in_display_names() -> None:
    payload = guild_message(member={"roles": [], "nick": "Ally"})
    payload["mentions"] = [{**BOT, "member": {"roles": [], "nick": "Cortex"}}]
    msg = normalize("MESSAGE_CREATE", payload)
    assert isinstance(msg, Message)
    assert msg.author.display_name == "Ally"
    assert msg.mentions[0].display_name == "Cortex"
    plain = normalize("MESSAGE_CREATE", guild_message(member={"roles": [], "nick": None}))
    assert isinstance(plain, Message)
    assert plain.author.display_name == "Alice A."


def test_the_system_user_is_marked() -> None:
    system = {"id": "643945264868098049", "username": "Discord", "system": True}
    msg = normalize("MESSAGE_CREATE", guild_message(author=system))
    assert isinstance(msg, Message)
    assert msg.author.system
    junk = normalize("MESSAGE_CREATE", guild_message(author={**system, "system": "yes"}))
    assert isinstance(junk, NormalizeError)


def test_bulk_thread_and_channel_deletes() -> None:
    bulk = normalize(
        "MESSAGE_DELETE_BULK", {"ids": ["11", "12"], "channel_id": CHANNEL, "guild_id": GUILD}
    )
    assert bulk == MessageDeleteBulk((11, 12), int(CHANNEL), int(GUILD))
    thread = normalize(
        "THREAD_DELETE", {"id": "33", "guild_id": GUILD, "parent_id": CHANNEL, "type": 11}
    )
    assert thread == ChannelDelete(33, 11, int(GUILD), int(CHANNEL))
    channel = normalize(
        "CHANNEL_DELETE",
        {"id": CHANNEL, "type": 0, "guild_id": GUILD, "name": "general", "position": 0},
    )
    assert channel == ChannelDelete(int(CHANNEL), 0, int(GUILD), None)
    assert isinstance(
        normalize("MESSAGE_DELETE_BULK", {"ids": "11", "channel_id": CHANNEL}), NormalizeError
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"message_snapshots": "x"},
        {"message_snapshots": [{"message": "x"}]},
        {"poll": {"question": "x", "answers": []}},
        {"poll": {"question": {"text": 1}}},
        {"sticker_items": [{"name": 3}]},
        {"member": {"nick": 5}},
        {"message_reference": {"type": "forward"}},
    ],
)
def test_junk_in_nested_fields_is_a_normalize_error(extra: dict[str, Any]) -> None:
    assert isinstance(normalize("MESSAGE_CREATE", guild_message(**extra)), NormalizeError)


def test_the_authors_member_roles_are_kept_and_junk_roles_grant_nothing() -> None:
    msg = normalize(
        "MESSAGE_CREATE", guild_message(member={"roles": ["41771983423143936", "7"], "nick": None})
    )
    assert isinstance(msg, Message)
    assert msg.member_roles == (41771983423143936, 7)
    for junk in (["x"], "7", [7.5], None):
        got = normalize("MESSAGE_CREATE", guild_message(member={"roles": junk, "nick": None}))
        assert isinstance(got, Message) and got.member_roles == ()
    without = guild_message()
    del without["member"]
    none = normalize("MESSAGE_CREATE", without)
    assert isinstance(none, Message) and none.member_roles == ()
