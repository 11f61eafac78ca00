"""INTERACTION_CREATE normalization: Discord's documented shapes, and junk that never raises."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from picortex.discord.normalize import normalize
from picortex.types import Interaction, InteractionOption, NormalizeError, User

TOKEN = "aW50ZXJhY3Rpb246MTIzOnNlY3JldHNlY3JldHNlY3JldA"
USER = {"id": "53908232506183680", "username": "mason", "global_name": "Mason", "avatar": None}

GUILD_COMMAND: dict[str, Any] = {
    "id": "786008729715212338",
    "application_id": "775799577604522054",
    "type": 2,
    "token": TOKEN,
    "version": 1,
    "guild_id": "290926798626357999",
    "channel_id": "645027906669510667",
    "channel": {"id": "645027906669510667", "type": 0, "name": "general"},
    "member": {"user": USER, "roles": [], "nick": "Mace", "permissions": "2147483647"},
    "locale": "en-US",
    "context": 0,
    "data": {
        "id": "771825006014889984",
        "name": "picortex",
        "type": 1,
        "options": [
            {
                "name": "whitelist",
                "type": 2,
                "options": [
                    {
                        "name": "add",
                        "type": 1,
                        "options": [
                            {"name": "user", "type": 6, "value": "42"},
                            {"name": "tier", "type": 3, "value": "trusted"},
                        ],
                    }
                ],
            }
        ],
        "resolved": {"users": {"42": {"id": "42", "username": "bob", "global_name": None}}},
    },
}


def test_a_guild_slash_command() -> None:
    got = normalize("INTERACTION_CREATE", GUILD_COMMAND)
    assert isinstance(got, Interaction)
    assert got.id == 786008729715212338
    assert got.application_id == 775799577604522054
    assert got.token == TOKEN
    assert got.guild_id == 290926798626357999 and got.channel_id == 645027906669510667
    assert got.user == User(53908232506183680, "mason", "Mace")  # the nickname first
    assert got.command_name == "picortex"
    add = got.options[0].options[0]
    assert add == InteractionOption(
        "add",
        1,
        options=(InteractionOption("user", 6, "42"), InteractionOption("tier", 3, "trusted")),
    )
    assert got.resolved_users == (User(42, "bob"),)
    assert TOKEN not in repr(got)


def test_a_dm_command_has_user_not_member() -> None:
    payload = copy.deepcopy(GUILD_COMMAND)
    del payload["member"], payload["guild_id"]
    payload["user"] = USER
    got = normalize("INTERACTION_CREATE", payload)
    assert isinstance(got, Interaction)
    assert got.is_dm and got.user.display_name == "Mason"


def test_autocomplete_marks_the_focused_option() -> None:
    payload = copy.deepcopy(GUILD_COMMAND)
    payload["type"] = 4
    payload["data"]["options"] = [
        {
            "name": "config",
            "type": 2,
            "options": [
                {
                    "name": "get",
                    "type": 1,
                    "options": [{"name": "key", "type": 3, "value": "po", "focused": True}],
                }
            ],
        }
    ]
    got = normalize("INTERACTION_CREATE", payload)
    assert isinstance(got, Interaction)
    assert got.options[0].options[0].options[0].focused


def test_junk_is_an_error_value_without_the_token() -> None:
    payload = copy.deepcopy(GUILD_COMMAND)
    payload["channel_id"] = {"no": 1}
    got = normalize("INTERACTION_CREATE", payload)
    assert isinstance(got, NormalizeError)
    assert TOKEN not in got.excerpt and TOKEN not in got.reason


@given(
    st.dictionaries(
        st.sampled_from(["id", "type", "token", "data", "member", "user", "channel_id"]),
        st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()), st.booleans()),
    )
)
def test_never_raises(payload: dict[str, Any]) -> None:
    got = normalize("INTERACTION_CREATE", payload)
    assert isinstance(got, Interaction | NormalizeError)


def test_the_members_roles_come_with_a_guild_command() -> None:
    payload = copy.deepcopy(GUILD_COMMAND)
    payload["member"]["roles"] = ["41771983423143936"]
    got = normalize("INTERACTION_CREATE", payload)
    assert isinstance(got, Interaction) and got.member_roles == (41771983423143936,)
    payload["member"]["roles"] = "junk"
    junk = normalize("INTERACTION_CREATE", payload)
    assert isinstance(junk, Interaction) and junk.member_roles == ()
