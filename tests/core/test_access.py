"""Access by role and channel and users' own attention modes (SPEC 18): the pure rules and
the `access` / `attention user` commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from picortex import config as config_mod
from picortex.config import Settings
from picortex.core import commands as cmds
from picortex.core.access import DENIED, NOT_ALLOWED, blocked_reason, role_tier, with_roles
from picortex.core.attention import USER_OVERRIDE, ModeChoice, choose_mode
from picortex.core.trust import Tier

CHANNEL, THREAD_PARENT, OTHER = 10, 11, 12
OWNER, ADMIN, PLAIN = 1, 4, 2


def blocked(
    channel: int, parent: int | None = None, *, guild: bool = True, **lists: tuple[int, ...]
) -> str | None:
    return blocked_reason(
        channel,
        parent,
        in_guild=guild,
        allow_channels=lists.get("allow", ()),
        deny_channels=lists.get("deny", ()),
    )


def test_no_lists_block_nothing() -> None:
    assert blocked(CHANNEL) is None
    assert blocked(CHANNEL, THREAD_PARENT) is None


def test_a_denied_channel_and_its_threads_are_blocked() -> None:
    assert blocked(CHANNEL, deny=(CHANNEL,)) == DENIED
    assert blocked(99, CHANNEL, deny=(CHANNEL,)) == DENIED  # a thread of a denied channel
    assert blocked(OTHER, deny=(CHANNEL,)) is None
    assert blocked(CHANNEL, guild=False, deny=(CHANNEL,)) == DENIED  # a DM named on purpose


def test_allow_channels_limits_guild_channels_to_the_list_and_their_threads() -> None:
    assert blocked(CHANNEL, allow=(CHANNEL,)) is None
    assert blocked(99, CHANNEL, allow=(CHANNEL,)) is None  # a thread of an allowed channel
    assert blocked(OTHER, allow=(CHANNEL,)) == NOT_ALLOWED
    assert blocked(99, OTHER, allow=(CHANNEL,)) == NOT_ALLOWED
    assert blocked(OTHER, guild=False, allow=(CHANNEL,)) is None  # DMs are not limited


def test_deny_beats_allow() -> None:
    assert blocked(CHANNEL, allow=(CHANNEL,), deny=(CHANNEL,)) == DENIED
    assert blocked(99, CHANNEL, allow=(99,), deny=(CHANNEL,)) == DENIED


def test_an_allowed_role_counts_as_user_and_never_lowers_a_listed_tier() -> None:
    assert role_tier((5, 6), (6,)) == Tier.USER
    assert role_tier((5,), (6,)) is None
    assert role_tier((6,), ()) is None
    assert with_roles(None, (6,), (6,)) == Tier.USER
    assert with_roles(Tier.ADMIN, (6,), (6,)) == Tier.ADMIN
    assert with_roles(Tier.TRUSTED, (), (6,)) == Tier.TRUSTED
    assert with_roles(None, (), (6,)) is None


def test_a_users_own_mode_beats_the_chats_and_access_beats_both() -> None:
    assert choose_mode("mentions-only", user_mode=None, blocked=None) == ModeChoice("mentions-only")
    assert choose_mode("mentions-only", user_mode="always", blocked=None) == ModeChoice(
        "always", USER_OVERRIDE
    )
    assert choose_mode("always", user_mode="silent", blocked=None).mode == "silent"
    assert choose_mode("always", user_mode="always", blocked=DENIED) == ModeChoice(
        "silent", DENIED, DENIED
    )
    # A stored mode we do not know is ignored: the chat's mode applies.
    assert choose_mode("always", user_mode="sometimes", blocked=None) == ModeChoice("always")


# ---- commands ---------------------------------------------------------------------------


def state(**changes: Any) -> cmds.CommandState:
    settings = Settings(home=Path("/nonexistent"), owner_id=OWNER)
    base = cmds.CommandState(
        owner_id=OWNER,
        trust={PLAIN: "user", ADMIN: "admin"},
        wakeword="!s",
        attention_mode="mentions-only",
        prompt_path="p",
        poll_enabled=False,
        poll_seconds=120.0,
        config_values=config_mod.runtime_values(settings),
        parse_config_value=config_mod.parse_runtime_value,
        format_config_value=config_mod.format_value,
        requester_id=ADMIN,
    )
    return attrs.evolve(base, **changes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("attention user <@7> always", cmds.AttentionUser((7,), "always")),
        ("attention user <@7><@8> 9 SILENT", cmds.AttentionUser((7, 8, 9), "silent")),
        ("attention user <@7> default", cmds.AttentionUser((7,), None)),
        ("access", cmds.AccessShow()),
        ("access show", cmds.AccessShow()),
        ("access allow-role <@&55> 56", cmds.AccessEdit("allow-role", (55, 56))),
        ("access deny-channel <#77>", cmds.AccessEdit("deny-channel", (77,))),
        ("access allow-channel 77, 78", cmds.AccessEdit("allow-channel", (77, 78))),
        ("access remove 77", cmds.AccessEdit("remove", (77,))),
    ],
)
def test_parse(text: str, expected: cmds.Command) -> None:
    assert cmds.parse_command(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("attention user", "Name users and a mode"),
        ("attention user <@7>", "Put a mode last"),
        ("attention user always", "Name at least one user"),
        ("attention user bob always", "is not a user mention"),
        ("access open", "Unknown access command"),
        ("access deny-channel", "Name at least one role or channel"),
        ("access deny-channel general", "is not a role or channel id"),
        ("access deny-channel 0", "is not a role or channel id"),
    ],
)
def test_parse_errors(text: str, fragment: str) -> None:
    parsed = cmds.parse_command(text)
    assert isinstance(parsed, cmds.Invalid) and fragment in parsed.error


def test_attention_user_sets_and_drops_own_modes() -> None:
    result = cmds.execute(
        cmds.parse_command("attention user <@7> <@8> always"), Tier.ADMIN, state()
    )
    assert result.ok
    assert result.changes == (
        cmds.UserAttentionChange(7, "always"),
        cmds.UserAttentionChange(8, "always"),
    )
    same = cmds.execute(
        cmds.AttentionUser((7,), "always"), Tier.ADMIN, state(user_modes={7: "always"})
    )
    assert same.ok and same.changes == () and "already `always`" in same.reply
    drop = cmds.execute(cmds.AttentionUser((7,), None), Tier.ADMIN, state(user_modes={7: "silent"}))
    assert drop.changes == (cmds.UserAttentionChange(7, None),)
    assert "chat's mode applies again" in drop.reply
    nothing = cmds.execute(cmds.AttentionUser((7,), None), Tier.ADMIN, state())
    assert nothing.outcome == "error" and nothing.changes == ()


def test_attention_user_and_access_need_an_admin() -> None:
    for text in ("attention user <@7> always", "access show", "access deny-channel 77"):
        result = cmds.execute(cmds.parse_command(text), Tier.TRUSTED, state())
        assert result.outcome == "denied" and result.changes == ()
        assert cmds.execute(cmds.parse_command(text), Tier.ADMIN, state()).outcome != "denied"


def test_attention_show_lists_own_modes_and_the_access_rule() -> None:
    reply = cmds.execute(
        cmds.AttentionShow(),
        Tier.ADMIN,
        state(user_modes={8: "silent", 7: "always"}, access_note=DENIED),
    ).reply
    assert "Attention mode: `mentions-only`" in reply
    assert "Users' own modes here: <@7>: `always`, <@8>: `silent`." in reply
    assert f"Silent here whatever the mode: the {DENIED}." in reply
    plain = cmds.execute(cmds.AttentionShow(), Tier.ADMIN, state()).reply
    assert "own modes" not in plain and "Silent here" not in plain


def run_access(text: str, values: dict[str, str]) -> cmds.CommandResult:
    base = state()
    return cmds.execute(
        cmds.parse_command(text),
        Tier.ADMIN,
        attrs.evolve(base, config_values={**base.config_values, **values}),
    )


def test_access_adds_to_one_list_as_a_config_change_that_parses_back() -> None:
    result = run_access("access allow-role <@&55> 56", {"access.allow_roles": "56"})
    assert result.changes == (cmds.ConfigChange("access.allow_roles", "56, 55"),)
    assert config_mod.parse_runtime_value("access.allow_roles", "56, 55") == (56, 55)
    deny = run_access("access deny-channel <#77>", {})
    assert deny.changes == (cmds.ConfigChange("access.deny_channels", "77"),)


def test_access_remove_takes_ids_off_every_list() -> None:
    result = run_access(
        "access remove 77 55",
        {"access.allow_roles": "55", "access.allow_channels": "77, 78", "access.deny_channels": ""},
    )
    assert set(result.changes) == {
        cmds.ConfigChange("access.allow_roles", ""),
        cmds.ConfigChange("access.allow_channels", "78"),
    }
    none = run_access("access remove 99", {})
    assert none.outcome == "error" and none.changes == ()
    again = run_access("access deny-channel 77", {"access.deny_channels": "77"})
    assert again.outcome == "error" and "already listed" in again.reply


def test_access_show_names_roles_and_channels() -> None:
    reply = run_access(
        "access show", {"access.allow_roles": "55", "access.deny_channels": "77"}
    ).reply
    assert "<@&55>" in reply and "<#77>" in reply and "every channel" in reply
