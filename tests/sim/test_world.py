"""The simulated world's rules and payload shapes, without sockets."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from picortex.sim.snowflake import DiscordClock, SnowflakeFactory, iso_timestamp
from picortex.sim.world import ApiError, SimError, World, parse_emoji
from picortex.types import DISCORD_EPOCH_MS, snowflake_ms


@pytest.fixture
def world() -> World:
    return World(SnowflakeFactory(lambda: DISCORD_EPOCH_MS + 1_000_000))


def _setup(world: World) -> tuple[int, int, int, int]:
    alice = world.add_user("alice")
    guild = world.add_guild("g")
    channel = world.add_channel(guild, "general")
    world.outbox.clear()
    return alice, guild, channel, world.bot_user_id


def test_snowflakes_increase_and_carry_the_clock() -> None:
    clock = [DISCORD_EPOCH_MS + 5_000]
    factory = SnowflakeFactory(lambda: clock[0])
    ids = factory.many(5000)
    assert ids == sorted(set(ids))
    assert snowflake_ms(ids[0]) == DISCORD_EPOCH_MS + 5_000
    clock[0] -= 1000  # the clock going back never makes an id go back
    assert factory.next() > ids[-1]


def test_discords_clock_is_the_wall_clock_run_at_the_pace_of_trios() -> None:
    wall = [1_750_000_000_000]
    clock = DiscordClock(lambda: wall[0])
    assert clock() == wall[0]  # outside a trio run: the wall clock

    async def in_a_run(mock: trio.testing.MockClock) -> list[int]:
        first = clock()
        wall[0] += 60_000  # the wall clock moves on while virtual time stands still...
        same = clock()
        mock.jump(5.0)  # ...and the other way round: Discord's clock follows the run's
        return [first, same, clock()]

    mock = trio.testing.MockClock()
    assert trio.run(in_a_run, mock, clock=mock) == [wall[0] - 60_000] * 2 + [wall[0] - 55_000]
    # A new run starts from the wall clock again.
    mock, start = trio.testing.MockClock(), wall[0]
    assert trio.run(in_a_run, mock, clock=mock)[0] == start


def test_iso_timestamp_has_discords_shape() -> None:
    assert iso_timestamp(1_499_794_027_299) == "2017-07-11T17:27:07.299000+00:00"


def test_rest_message_has_no_gateway_extras_and_gateway_one_has_them(world: World) -> None:
    alice, guild, channel, _ = _setup(world)
    message = world.create_message(channel, alice, "hello")
    rest = world.message_payload(message, gateway=False)
    assert "guild_id" not in rest
    assert "member" not in rest
    gateway = world.message_payload(message, gateway=True)
    assert gateway["guild_id"] == str(guild)
    assert "user" not in gateway["member"]
    assert gateway["author"]["username"] == "alice"
    assert gateway["id"] == str(message.id)
    assert gateway["timestamp"].endswith("+00:00")
    dispatch = world.outbox[-1]
    assert dispatch.name == "MESSAGE_CREATE"
    assert dispatch.data == gateway
    assert dispatch.guild_id == guild
    assert dispatch.strippable  # alice's text is hidden from bots without MESSAGE_CONTENT


def test_dm_messages_have_no_guild_id(world: World) -> None:
    alice, _, _, _ = _setup(world)
    dm = world.open_dm(alice)
    assert world.open_dm(alice) == dm
    message = world.create_message(dm, alice, "psst")
    payload = world.message_payload(message, gateway=True)
    assert "guild_id" not in payload
    assert "member" not in payload
    assert not world.outbox[-1].strippable  # DMs keep their content
    channel = world.channel_payload(world.channels[dm])
    assert channel["type"] == 1
    assert channel["recipients"][0]["id"] == str(alice)


def test_stranger_cannot_post_in_someone_elses_dm(world: World) -> None:
    alice, _, _, _ = _setup(world)
    bob = world.add_user("bob")
    dm = world.open_dm(alice)
    with pytest.raises(SimError):
        world.create_message(dm, bob, "hi")


def test_mentions_come_from_content_with_member_on_gateway(world: World) -> None:
    alice, _, channel, bot = _setup(world)
    message = world.create_message(channel, alice, f"<@{bot}> hi <@!{alice}> @everyone <@&42>")
    payload = world.message_payload(message, gateway=True)
    assert [u["id"] for u in payload["mentions"]] == [str(bot), str(alice)]
    assert "member" in payload["mentions"][0]
    assert payload["mention_everyone"] is True
    assert payload["mention_roles"] == ["42"]
    assert not world.outbox[-1].strippable  # mentioning the bot keeps the content


def test_allowed_mentions_filter_what_is_mentioned(world: World) -> None:
    alice, _, channel, bot = _setup(world)
    content = f"@everyone <@{alice}> <@&7>"
    quiet = world.create_message(channel, bot, content, allowed_mentions={"parse": []})
    assert (quiet.mentions, quiet.mention_roles, quiet.mention_everyone) == ([], [], False)
    users = world.create_message(channel, bot, content, allowed_mentions={"users": [str(alice)]})
    assert (users.mentions, users.mention_everyone) == ([alice], False)
    loud = world.create_message(channel, bot, content)
    assert (loud.mentions, loud.mention_roles, loud.mention_everyone) == ([alice], [7], True)


def test_reply_carries_reference_and_pings_the_author_by_default(world: World) -> None:
    alice, guild, channel, bot = _setup(world)
    first = world.create_message(channel, alice, "question")
    reply = world.create_message(channel, bot, "answer", reply_to=first.id)
    payload = world.message_payload(reply, gateway=True)
    assert payload["type"] == 19
    assert payload["message_reference"] == {
        "type": 0,
        "channel_id": str(channel),
        "message_id": str(first.id),
        "guild_id": str(guild),
    }
    assert payload["referenced_message"]["content"] == "question"
    assert [u["id"] for u in payload["mentions"]] == [str(alice)]
    silent = world.create_message(
        channel, bot, "again", reply_to=first.id, allowed_mentions={"parse": []}
    )
    assert silent.mentions == []
    world.delete_message(channel, first.id)
    assert world.message_payload(reply, gateway=False)["referenced_message"] is None


def test_reply_to_unknown_message_is_a_form_error(world: World) -> None:
    alice, _, channel, _ = _setup(world)
    with pytest.raises(ApiError) as info:
        world.create_message(channel, alice, "x", reply_to=12345)
    assert info.value.code == 50035
    assert "message_reference" in info.value.body()["errors"]


def test_history_is_newest_first_with_before_after_around(world: World) -> None:
    alice, _, channel, _ = _setup(world)
    ids = [world.create_message(channel, alice, str(n)).id for n in range(10)]
    assert [m.id for m in world.history(channel, limit=3)] == ids[:-4:-1]
    assert [m.id for m in world.history(channel, before=ids[5], limit=2)] == [ids[4], ids[3]]
    assert [m.id for m in world.history(channel, after=ids[5], limit=2)] == [ids[7], ids[6]]
    around = [m.id for m in world.history(channel, around=ids[5], limit=4)]
    assert around == [ids[6], ids[5], ids[4], ids[3]]


def test_thread_from_message_reuses_the_message_id(world: World) -> None:
    alice, guild, channel, bot = _setup(world)
    message = world.create_message(channel, alice, "topic")
    world.outbox.clear()
    thread = world.start_thread(channel, "talk", owner_id=bot, message_id=message.id)
    assert thread.id == message.id
    payload = world.channel_payload(thread)
    assert payload["type"] == 11
    assert payload["parent_id"] == str(channel)
    assert payload["guild_id"] == str(guild)
    names = [d.name for d in world.outbox]
    assert names == ["THREAD_CREATE", "MESSAGE_UPDATE"]
    assert world.outbox[0].data["newly_created"] is True
    assert world.outbox[1].data["thread"]["id"] == str(thread.id)
    with pytest.raises(ApiError) as info:
        world.start_thread(channel, "again", owner_id=bot, message_id=message.id)
    assert info.value.code == 160004
    inside = world.create_message(thread.id, alice, "in thread")
    assert world.message_payload(inside, gateway=True)["position"] == 0
    assert world.channel_payload(thread)["message_count"] == 1


def test_guild_create_lists_channels_without_guild_id(world: World) -> None:
    _alice, guild, channel, bot = _setup(world)
    payload = world.guild_create_payload(guild)
    assert payload["channels"][0]["id"] == str(channel)
    assert "guild_id" not in payload["channels"][0]
    assert payload["unavailable"] is False
    assert payload["members"][0]["user"]["id"] == str(bot)
    assert payload["roles"][0]["id"] == str(guild)


def test_reactions_add_once_and_remove(world: World) -> None:
    alice, _guild, channel, bot = _setup(world)
    message = world.create_message(channel, bot, "vote")
    world.outbox.clear()
    assert world.add_reaction(channel, message.id, alice, "👍")
    assert not world.add_reaction(channel, message.id, alice, "👍")
    event = world.outbox[-1]
    assert event.name == "MESSAGE_REACTION_ADD"
    assert event.data["emoji"] == {"id": None, "name": "👍"}
    assert event.data["message_author_id"] == str(bot)
    assert event.data["member"]["user"]["id"] == str(alice)
    reactions = world.message_payload(message, gateway=False)["reactions"]
    assert reactions[0]["count"] == 1
    assert reactions[0]["me"] is False
    assert world.remove_reaction(channel, message.id, alice, "👍")
    assert world.outbox[-1].name == "MESSAGE_REACTION_REMOVE"
    assert "member" not in world.outbox[-1].data
    assert "reactions" not in world.message_payload(message, gateway=False)


def test_parse_emoji_accepts_unicode_and_custom_only() -> None:
    assert parse_emoji("1️⃣") == {"id": None, "name": "1️⃣"}
    assert parse_emoji("party:123") == {"id": "123", "name": "party", "animated": False}
    for bad in ("", "thumbsup", "party:abc", ":123"):
        with pytest.raises(ApiError) as info:
            parse_emoji(bad)
        assert info.value.code == 10014


def test_unknown_ids_raise_discords_errors(world: World) -> None:
    with pytest.raises(ApiError) as info:
        world.channel(1)
    assert (info.value.status, info.value.code) == (404, 10003)
    _, _, channel, _ = _setup(world)
    with pytest.raises(ApiError) as info:
        world.message(channel, 1)
    assert (info.value.status, info.value.code) == (404, 10008)
    with pytest.raises(SimError):
        world.user(1)
