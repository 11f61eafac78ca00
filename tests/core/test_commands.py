"""Command detection, parsing and execution (SPEC 5 step 3, SPEC 6)."""

from __future__ import annotations

import string
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.core.chat_settings import (
    ChatSettingChange,
    ChatSettings,
    ChatSettingSet,
    parse_prompt,
)
from picortex.core.commands import (
    ACCESS_ACTIONS,
    ATTENTION_MODES,
    AccessEdit,
    AccessShow,
    AttentionChange,
    AttentionSet,
    AttentionShow,
    AttentionUser,
    Command,
    CommandState,
    ConfigChange,
    ConfigGet,
    ConfigSet,
    Forget,
    ForgetUser,
    Forgotten,
    Help,
    Invalid,
    PollHelp,
    PollStart,
    Speak,
    StartPoll,
    Stay,
    TrustChange,
    Unknown,
    WhitelistAdd,
    WhitelistHelp,
    WhitelistList,
    WhitelistRemove,
    command_name,
    detect_command,
    execute,
    find_command_text,
    forgotten_reply,
    parse_command,
    parse_user_ids,
    render_command,
    strip_mention,
)
from picortex.core.trust import Tier
from picortex.errors import ConfigError
from picortex.types import Message, User

BOT = 4242
OWNER = 1
WW = "!s"


def find(content: str, *, guild: bool, wakeword: str = WW, bot: int | None = BOT) -> str | None:
    return find_command_text(content, wakeword=wakeword, bot_user_id=bot, require_mention=guild)


# --- detection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("!s whitelist list", "whitelist list"),
        ("!S whitelist list", "whitelist list"),
        ("!s   whitelist list  ", "whitelist list"),
        ("!s\twhitelist list", "whitelist list"),
        ("/picortex whitelist list", "whitelist list"),
        ("/PICORTEX help", "help"),
        ("!s help", "help"),
        ("!s ", ""),
        ("<@4242> !s help", "help"),  # a mention is allowed in a DM, not needed
        ("whitelist list", None),
        ("!s", None),
        ("!space", None),
        ("!swhitelist list", None),
        ("hey!s whitelist list", None),
        (" !s whitelist list", None),
        ("/picortexhelp", None),
        ("/picortex", None),
        ("", None),
    ],
)
def test_detect_in_dm(content: str, expected: str | None) -> None:
    assert find(content, guild=False) == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<@4242> !s whitelist list", "whitelist list"),
        ("<@!4242> !s whitelist list", "whitelist list"),
        ("<@4242>!s whitelist list", "whitelist list"),
        ("<@4242>    !S whitelist list", "whitelist list"),
        ("<@4242>\n!s whitelist list", "whitelist list"),
        ("<@4242> /picortex config get", "config get"),
        ("!s whitelist list", None),  # no mention in a guild
        ("<@4243> !s whitelist list", None),  # someone else's mention
        ("<@&4242> !s whitelist list", None),  # a role mention is not the bot
        ("hi <@4242> !s whitelist list", None),  # the mention must come first
        ("<@4242> hello there", None),
        ("<@4242> !space", None),
    ],
)
def test_detect_in_guild(content: str, expected: str | None) -> None:
    assert find(content, guild=True) == expected


def test_guild_commands_need_a_known_bot_id() -> None:
    assert find("<@4242> !s help", guild=True, bot=None) is None
    assert find("!s help", guild=False, bot=None) == "help"


def test_custom_wakeword() -> None:
    assert find("?Bot help", guild=False, wakeword="?bot") == "help"
    assert find("!s help", guild=False, wakeword="?bot") is None
    assert find("/picortex help", guild=False, wakeword="?bot") == "help"


def test_empty_wakeword_only_allows_slash_prefix() -> None:
    assert find(" help", guild=False, wakeword="") is None
    assert find("/picortex help", guild=False, wakeword="") == "help"


def _message(content: str, guild_id: int | None) -> Message:
    return Message(
        id=1,
        channel_id=2,
        author=User(3, "alice"),
        content=content,
        timestamp="2025-01-01T00:00:00+00:00",
        guild_id=guild_id,
    )


def test_detect_command_uses_the_guild_and_group_dm() -> None:
    assert detect_command(_message("!s help", None), wakeword=WW, bot_user_id=BOT) == "help"
    assert detect_command(_message("!s help", 77), wakeword=WW, bot_user_id=BOT) is None
    assert (
        detect_command(_message("!s help", None), wakeword=WW, bot_user_id=BOT, group_dm=True)
        is None
    )
    assert detect_command(_message("<@4242> !s help", 77), wakeword=WW, bot_user_id=BOT) == "help"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<@4242> what time is it", "what time is it"),
        ("<@!4242>what time is it", "what time is it"),
        ("<@4243> what time is it", "<@4243> what time is it"),
        ("what <@4242> time", "what <@4242> time"),
        ("<@4242>", ""),
        ("", ""),
    ],
)
def test_strip_mention(content: str, expected: str) -> None:
    assert strip_mention(content, BOT) == expected


def test_strip_mention_without_bot_id_keeps_text() -> None:
    assert strip_mention("<@4242> hi", None) == "<@4242> hi"


# --- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", Help()),
        ("help", Help()),
        ("HELP Whitelist", Help("whitelist")),
        ("whitelist", WhitelistHelp()),
        ("whitelist help", WhitelistHelp()),
        ("Whitelist LIST", WhitelistList()),
        ("whitelist add <@5>", WhitelistAdd((5,), Tier.USER)),
        ("whitelist add <@!5> trusted", WhitelistAdd((5,), Tier.TRUSTED)),
        ("whitelist add 5 6 ADMIN", WhitelistAdd((5, 6), Tier.ADMIN)),
        ("whitelist add <@5><@6>", WhitelistAdd((5, 6), Tier.USER)),
        ("whitelist add <@5>, <@6>, 7", WhitelistAdd((5, 6, 7), Tier.USER)),
        ("whitelist add <@5> <@5> 5", WhitelistAdd((5,), Tier.USER)),
        ("whitelist remove <@5> 6", WhitelistRemove((5, 6))),
        ("attention", AttentionShow()),
        ("attention show", AttentionShow()),
        ("attention Silent", AttentionSet("silent")),
        ("attention discriminate-quiet", AttentionSet("discriminate-quiet")),
        ("config", ConfigGet(None)),
        ("config get", ConfigGet(None)),
        ("config get Wakeword", ConfigGet("wakeword")),
        ("config set wakeword ?x", ConfigSet("wakeword", "?x")),
        ('config set wakeword "!x"', ConfigSet("wakeword", "!x")),
        (
            "config set attention.group  mentions-only ",
            ConfigSet("attention.group", "mentions-only"),
        ),
        (
            "config set response_policy.sensitive_commands whitelist, config",
            ConfigSet("response_policy.sensitive_commands", "whitelist, config"),
        ),
        ("poll", PollHelp()),
        ("poll help", PollHelp()),
        ("poll Lunch? | Pizza | Sushi", PollStart("Lunch?", ("Pizza", "Sushi"))),
        ('poll "Best?" A // B // C', PollStart("Best?", ("A", "B", "C"))),
        ("speak", Speak("")),
        ("speak hello there", Speak("hello there")),
        ("stay <@5>", Stay("<@5>")),
        ("frobnicate now", Unknown("frobnicate")),
        ("Dance", Unknown("Dance")),
    ],
)
def test_parse(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    ("text", "command", "fragment"),
    [
        ("whitelist add", "whitelist", "Name at least one user"),
        ("whitelist add trusted", "whitelist", "Name at least one user"),
        ("whitelist add <@5> admins", "whitelist", "Unknown tier `admins`"),
        ("whitelist add bob", "whitelist", "`bob` is not a user mention"),
        ("whitelist add bob <@5>", "whitelist", "`bob` is not a user mention"),
        ("whitelist add <@&5>", "whitelist", "`<@&5>` is not a user mention"),
        ("whitelist add 0", "whitelist", "`0` is not a user mention"),
        ("whitelist add 99999999999999999999", "whitelist", "is not a user mention"),
        ("whitelist remove", "whitelist", "Name at least one user"),
        ("whitelist add <@5> admin <@6>", "whitelist", "Put the tier last"),
        ("whitelist remove <@5> trusted", "whitelist", "`trusted` is not a user mention"),
        ("whitelist purge", "whitelist", "Unknown whitelist command `purge`"),
        ("attention loud", "attention", "Unknown attention mode `loud`"),
        ("config set", "config", "Give a key and a value"),
        ("config set wakeword", "config", "Give a key and a value"),
        ("config del wakeword", "config", "Unknown config command `del`"),
        ("poll Lunch?", "poll", "Separate the question"),
        ("poll Q | only one", "poll", "2 to 4 options"),
    ],
)
def test_parse_errors(text: str, command: str, fragment: str) -> None:
    parsed = parse_command(text)
    assert isinstance(parsed, Invalid)
    assert parsed.command == command
    assert fragment in parsed.error
    assert command_name(parsed) == command


def test_error_echo_is_short_and_has_no_backticks() -> None:
    parsed = parse_command("whitelist add " + "`x" * 100)
    assert isinstance(parsed, Invalid)
    assert parsed.error.count("`") == 2
    assert len(parsed.error) < 120


@pytest.mark.parametrize(
    ("token", "ids"),
    [
        ("<@12>", (12,)),
        ("<@!12>", (12,)),
        ("12", (12,)),
        ("<@12><@!13>", (12, 13)),
        ("<@12>x", None),
        ("@bob", None),
        ("<@>", None),
        ("-12", None),
        ("\u0661\u0662", None),  # non-ASCII digits are not ids
        ("0", None),
        (str(2**63), None),
    ],
)
def test_parse_user_ids(token: str, ids: tuple[int, ...] | None) -> None:
    assert parse_user_ids(token) == ids


# --- hypothesis: parsers never raise and round-trip -------------------------------------

user_ids = st.integers(min_value=1, max_value=2**63 - 1)
key_text = st.from_regex(r"[a-z_][a-z0-9_.]{0,30}", fullmatch=True)
safe_text = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
        blacklist_characters='|/"\u201c\u201d',
    ),
    min_size=1,
    max_size=20,
)
phrase = st.lists(safe_text, min_size=1, max_size=4).map(" ".join)
names = {"whitelist", "attention", "access", "config", "poll", "forget", "speak", "stay", "help"}

valid_commands: st.SearchStrategy[Command] = st.one_of(
    st.just(WhitelistList()),
    st.just(WhitelistHelp()),
    st.builds(
        WhitelistAdd,
        st.lists(user_ids, min_size=1, max_size=5, unique=True).map(tuple),
        st.sampled_from(list(Tier)),
    ),
    st.builds(WhitelistRemove, st.lists(user_ids, min_size=1, max_size=5, unique=True).map(tuple)),
    st.builds(AttentionSet, st.sampled_from(ATTENTION_MODES)),
    st.just(AttentionShow()),
    st.builds(
        AttentionUser,
        st.lists(user_ids, min_size=1, max_size=3, unique=True).map(tuple),
        st.none() | st.sampled_from(ATTENTION_MODES),
    ),
    st.just(AccessShow()),
    st.builds(
        AccessEdit,
        st.sampled_from(ACCESS_ACTIONS),
        st.lists(user_ids, min_size=1, max_size=3, unique=True).map(tuple),
    ),
    st.builds(ConfigGet, st.none() | key_text),
    st.builds(ConfigSet, key_text, st.text(min_size=1).map(str.strip).filter(bool)),
    st.builds(
        PollStart,
        phrase.filter(lambda q: len(q) <= 1000),
        st.lists(phrase.filter(lambda o: len(o) <= 80), min_size=2, max_size=4).map(tuple),
    ),
    st.just(PollHelp()),
    st.builds(
        Forget,
        st.lists(user_ids, max_size=3, unique=True).map(tuple),
        st.booleans(),
    ).filter(lambda f: f.me or f.user_ids),
    st.builds(Speak, st.just("") | phrase),
    st.builds(Stay, st.just("") | phrase),
    st.builds(Help, st.none() | st.from_regex(r"[a-z]{1,10}", fullmatch=True)),
    st.builds(
        Unknown,
        st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,15}", fullmatch=True).filter(
            lambda w: w.lower() not in names
        ),
    ),
)
ascii_wakeword = st.text(
    alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=1, max_size=8
).filter(lambda w: not w.startswith("<@"))


@given(st.text())
def test_parse_never_raises(text: str) -> None:
    result = parse_command(text)
    assert isinstance(command_name(result), str)


@given(st.text(), st.text(max_size=10), st.booleans(), st.none() | user_ids)
def test_find_never_raises(content: str, wakeword: str, guild: bool, bot: int | None) -> None:
    found = find_command_text(content, wakeword=wakeword, bot_user_id=bot, require_mention=guild)
    assert found is None or found == found.strip()


@given(valid_commands)
def test_round_trip(command: Command) -> None:
    assert parse_command(render_command(command)) == command


@given(valid_commands, ascii_wakeword, st.data())
def test_round_trip_through_detection_with_any_wakeword_case(
    command: Command, wakeword: str, data: st.DataObject
) -> None:
    typed = "".join(data.draw(st.sampled_from([c.lower(), c.upper()])) for c in wakeword)
    text = f"{typed} {render_command(command)}"
    found = find(text, guild=False, wakeword=wakeword)
    assert found is not None
    assert parse_command(found) == command


@given(
    valid_commands,
    st.sampled_from(["<@{}>", "<@!{}>"]),
    st.text(alphabet=" \n", max_size=3),
)
def test_mention_forms_in_a_guild(command: Command, form: str, spaces: str) -> None:
    text = f"{form.format(BOT)}{spaces}{WW} {render_command(command)}"
    found = find(text, guild=True)
    assert found is not None
    assert parse_command(found) == command
    assert find(f"{form.format(BOT + 1)}{spaces}{WW} x", guild=True) is None


@given(ascii_wakeword, st.text(alphabet=string.ascii_letters, min_size=1, max_size=10))
def test_wakeword_glued_to_a_word_is_not_a_command(wakeword: str, word: str) -> None:
    assert find(wakeword + word, guild=False, wakeword=wakeword) is None
    assert find(f"x{wakeword} {word}", guild=False, wakeword=wakeword) is None


@given(st.text(min_size=1, max_size=8).filter(lambda w: not any(c.isspace() for c in w)))
def test_any_wakeword_matches_itself(wakeword: str) -> None:
    assert find(f"{wakeword} help", guild=False, wakeword=wakeword) == "help"


# --- execution -----------------------------------------------------------------------


def parse_value(key: str, text: str) -> object:
    if key == "poll_seconds":
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{key} must be a number, not {text!r}.") from None
        if value <= 0:
            raise ConfigError(f"{key} must be positive.")
        return value
    if key == "broken":
        raise ValueError
    return text


def format_value(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def state(**changes: Any) -> CommandState:
    base = CommandState(
        owner_id=OWNER,
        trust={2: "user", 3: "trusted", 4: "admin"},
        wakeword=WW,
        attention_mode="mentions-only",
        prompt_path="chats/9/.picortex/prompts/discriminator.md",
        poll_enabled=True,
        poll_seconds=120.0,
        config_values={"wakeword": "!s", "poll_seconds": "120", "broken": "x"},
        parse_config_value=parse_value,
        format_config_value=format_value,
        requester_id=OWNER,
    )
    return attrs.evolve(base, **changes)


def run(text: str, tier: Tier = Tier.ADMIN, **changes: Any) -> tuple[str, tuple[object, ...], str]:
    result = execute(parse_command(text), tier, state(**changes))
    return result.reply, result.changes, result.outcome


def test_whitelist_list_shows_owner_and_tiers_in_order() -> None:
    reply, changes, outcome = run("whitelist list")
    assert outcome == "ok"
    assert changes == ()
    assert reply.splitlines() == [
        "Trust list:",
        "- <@1>: admin (owner)",
        "- <@4>: admin",
        "- <@3>: trusted",
        "- <@2>: user",
    ]


def test_whitelist_list_empty() -> None:
    assert run("whitelist list", trust={}, owner_id=None)[0] == (
        "The trust list is empty and no owner is set."
    )
    assert "No one else" in run("whitelist list", trust={})[0]


def test_whitelist_add_sets_tiers() -> None:
    reply, changes, outcome = run("whitelist add <@7> <@8> trusted")
    assert outcome == "ok"
    assert changes == (TrustChange(7, Tier.TRUSTED), TrustChange(8, Tier.TRUSTED))
    assert reply == "Added as trusted: <@7>, <@8>."


def test_whitelist_add_default_tier_is_user_and_reports_unchanged() -> None:
    reply, changes, _ = run("whitelist add 2 9")
    assert changes == (TrustChange(9, Tier.USER),)
    assert reply == "Added as user: <@9>. Already user: <@2>."


def test_whitelist_add_changes_an_existing_tier() -> None:
    reply, changes, _ = run("whitelist add <@2> <@1> admin")
    assert changes == (TrustChange(2, Tier.ADMIN),)
    assert reply == "Changed to admin: <@2>. <@1> is the owner and always admin."


def test_whitelist_add_owner_is_a_no_op() -> None:
    reply, changes, outcome = run("whitelist add <@1> user")
    assert changes == ()
    assert outcome == "error"
    assert "owner" in reply


def test_whitelist_remove() -> None:
    reply, changes, outcome = run("whitelist remove <@2> <@3> 99")
    assert outcome == "ok"
    assert changes == (TrustChange(2, None), TrustChange(3, None))
    assert reply == "Removed <@2>, <@3>. Not on the list: <@99>."


def test_owner_cannot_be_removed() -> None:
    reply, changes, outcome = run("whitelist remove <@1>")
    assert changes == ()
    assert outcome == "error"
    assert reply == "The owner cannot be removed."
    reply, changes, _ = run("whitelist remove <@1> <@2>")
    assert changes == (TrustChange(2, None),)
    assert "The owner cannot be removed." in reply


def test_whitelist_help_and_errors_show_usage() -> None:
    reply, _, outcome = run("whitelist")
    assert outcome == "ok"
    assert "!s whitelist add @user.. [user|trusted|admin]" in reply
    reply, _, outcome = run("whitelist add <@5> admins")
    assert outcome == "error"
    assert reply == "Unknown tier `admins`: use user, trusted or admin."


@pytest.mark.parametrize("tier", [Tier.USER, Tier.TRUSTED])
@pytest.mark.parametrize(
    "text", ["whitelist list", "whitelist add <@9>", "config get", "attention silent", "whitelist"]
)
def test_admin_commands_are_denied_below_admin(text: str, tier: Tier) -> None:
    reply, changes, outcome = run(text, tier)
    assert outcome == "denied"
    assert changes == ()
    assert "needs an admin" in reply


@pytest.mark.parametrize("tier", list(Tier))
def test_open_commands_run_for_every_tier(tier: Tier) -> None:
    assert run("help", tier)[2] == "ok"
    assert run("speak hi", tier)[2] == "ok"
    assert run("poll A? | x | y", tier)[2] == "ok"


def test_attention() -> None:
    reply, changes, _ = run("attention")
    assert reply == (
        "Attention mode: `mentions-only`. "
        "Discriminator prompt: `chats/9/.picortex/prompts/discriminator.md`. "
        "Discriminator model: the default. Confidence threshold: none (the default). "
        "Agent prompt: the owner's."
    )
    assert changes == ()
    reply, changes, _ = run("attention always")
    assert changes == (AttentionChange("always"),)
    assert "now `always`" in reply
    reply, changes, _ = run("attention mentions-only")
    assert changes == ()
    assert "already" in reply
    reply, changes, outcome = run("attention loud")
    assert outcome == "error"
    assert reply.startswith("Unknown attention mode `loud`")


def test_config_get() -> None:
    reply, _, _ = run("config get")
    assert reply == "```\nbroken = x\npoll_seconds = 120\nwakeword = !s\n```"
    assert run("config get wakeword")[0] == "`wakeword` = `!s`"
    reply, _, outcome = run("config get nope")
    assert outcome == "error"
    assert reply == "Unknown config key `nope`; `config get` lists them."
    assert run("config get", config_values={})[0] == "No runtime settings."


def test_config_set() -> None:
    reply, changes, outcome = run("config set poll_seconds 60")
    assert (reply, changes, outcome) == (
        "`poll_seconds` is now `60`.",
        (ConfigChange("poll_seconds", "60"),),
        "ok",
    )
    reply, changes, outcome = run("config set poll_seconds soon")
    assert changes == ()
    assert outcome == "error"
    assert reply == "Could not set `poll_seconds`: poll_seconds must be a number, not 'soon'."
    reply, _, outcome = run("config set nope 1")
    assert outcome == "error"
    assert "Unknown config key `nope`" in reply
    reply, _, _ = run("config set broken 1")
    assert reply == "Could not set `broken`: that value is not valid"


def test_poll_starts_only_when_enabled() -> None:
    reply, changes, outcome = run('poll "Lunch?" Pizza // Sushi', Tier.USER)
    assert outcome == "ok"
    assert changes == (StartPoll("Lunch?", ("Pizza", "Sushi")),)
    assert reply.startswith("\U0001f4ca **Lunch?**\n1\ufe0f\u20e3 Pizza\n2\ufe0f\u20e3 Sushi")
    assert "2 minutes" in reply
    reply, changes, outcome = run("poll Lunch? | Pizza | Sushi", poll_enabled=False)
    assert (changes, outcome) == ((), "error")
    assert "turned off" in reply
    assert "turned off" in run("poll Lunch?", poll_enabled=False)[0]
    reply, _, _ = run("poll Lunch?")
    assert reply.startswith("Separate the question")
    assert "poll" in run("poll")[0]


def test_voice_commands_say_not_available() -> None:
    assert "voice is not available" in run("speak hello")[0]
    assert "voice is not available" in run("stay")[0]


def test_help_and_unknown() -> None:
    reply, _, outcome = run("help")
    assert outcome == "ok"
    assert "whitelist" in reply
    assert "poll" in reply
    assert run("help poll")[0].startswith("Start a poll")
    assert "attention show" in run("help attention")[0]
    assert "config set" in run("help config")[0]
    reply, _, outcome = run("dance")
    assert outcome == "error"
    assert reply.startswith("I don't know `dance`. Commands")
    assert "whitelist" in run("", Tier.USER)[0]


def test_denied_text_names_the_tier() -> None:
    reply, _, _ = run("config set wakeword ?x", Tier.TRUSTED)
    assert reply == "`config` needs an admin or higher."


@settings(max_examples=200)
@given(
    st.text(),
    st.sampled_from(list(Tier)),
    st.dictionaries(user_ids, st.sampled_from(["user", "trusted", "admin", "bogus"]), max_size=5),
    st.booleans(),
)
def test_execute_never_raises(text: str, tier: Tier, trust: dict[int, str], polls: bool) -> None:
    result = execute(parse_command(text), tier, state(trust=trust, poll_enabled=polls))
    assert result.reply
    assert result.outcome in ("ok", "error", "denied")
    if result.outcome == "denied":
        assert result.changes == ()


@given(
    st.lists(user_ids, min_size=1, max_size=6, unique=True),
    st.dictionaries(user_ids, st.sampled_from(["user", "trusted", "admin"]), max_size=5),
    st.sampled_from(list(Tier)),
)
def test_whitelist_changes_never_touch_the_owner(
    ids: list[int], trust: dict[int, str], tier: Tier
) -> None:
    mentions = " ".join(f"<@{i}>" for i in [OWNER, *ids])
    for text in (f"whitelist add {mentions} {tier.label}", f"whitelist remove {mentions}"):
        result = execute(parse_command(text), Tier.ADMIN, state(trust=trust))
        changes = [c for c in result.changes if isinstance(c, TrustChange)]
        assert all(c.user_id != OWNER for c in changes)
        if text.startswith("whitelist remove"):
            assert {c.user_id for c in changes} == {i for i in ids if i in trust and i != OWNER}
        else:
            assert {c.user_id for c in changes} == {
                i for i in ids if i != OWNER and trust.get(i) != tier.label
            }


# --- owner-only powers (SPEC 6) ---------------------------------------------------------

ADMIN_ID = 4  # an admin on the trust list, not the owner


@pytest.mark.parametrize(
    "text",
    [
        "whitelist add <@7> admin",  # minting an admin
        "whitelist add <@4> user",  # demoting an admin
        "whitelist remove <@4>",  # removing an admin
        "whitelist add <@7> <@4> trusted",  # an admin hidden among others
        "config set budget.ceiling_usd 1000000",
        "config set models.general claude-opus-5-5",
        "config set models.route auto",  # Opus for more requests: money
        "config set prices.claude-opus-5-5.input 0",
        "config set response_policy.default_mode channel",
        "config set BUDGET.global_ceiling_usd 5",
    ],
)
def test_an_admin_who_is_not_the_owner_is_refused_owner_powers(text: str) -> None:
    reply, changes, outcome = run(text, requester_id=ADMIN_ID)
    assert outcome == "denied"
    assert changes == ()
    assert reply.startswith("Only the owner can")
    assert "\n" not in reply


@pytest.mark.parametrize(
    "text", ["whitelist add <@7> admin", "whitelist remove <@4>", "whitelist add <@4> user"]
)
def test_the_owner_may_grant_and_revoke_admin(text: str) -> None:
    _, changes, outcome = run(text)
    assert outcome == "ok"
    assert changes


def test_an_admin_may_still_manage_users_and_ordinary_keys() -> None:
    _, changes, outcome = run("whitelist add <@7> trusted", requester_id=ADMIN_ID)
    assert (outcome, changes) == ("ok", (TrustChange(7, Tier.TRUSTED),))
    _, changes, outcome = run("whitelist remove <@3>", requester_id=ADMIN_ID)
    assert (outcome, changes) == ("ok", (TrustChange(3, None),))
    _, changes, outcome = run("config set poll_seconds 60", requester_id=ADMIN_ID)
    assert outcome == "ok"
    assert changes == (ConfigChange("poll_seconds", "60"),)


def test_no_requester_is_never_the_owner() -> None:
    reply, _, outcome = run("whitelist add <@7> admin", requester_id=None)
    assert outcome == "denied"
    assert reply == "Only the owner can grant or revoke `admin`."


# --- forget (SPEC 8) -------------------------------------------------------------------------

STRANGER = 9  # on no list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("forget me", Forget((), True)),
        ("FORGET Me", Forget((), True)),
        ("forget <@7> 8, <@7>", Forget((7, 8), False)),
        ("forget me <@7>", Forget((7,), True)),
        ("forget", Invalid("forget", "Say whom to forget: `forget me` or `forget @user..`.")),
        ("forget you", Invalid("forget", "`you` is not a user mention or a user id.")),
    ],
)
def test_parse_forget(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize("tier", [None, Tier.USER, Tier.TRUSTED, Tier.ADMIN])
def test_forget_me_is_open_to_anyone_and_forgets_only_the_requester(tier: Tier | None) -> None:
    result = execute(parse_command("forget me"), tier, state(requester_id=STRANGER))
    assert (result.outcome, result.changes) == ("ok", (ForgetUser(STRANGER),))
    # Naming oneself is the same request.
    result = execute(parse_command(f"forget <@{STRANGER}>"), tier, state(requester_id=STRANGER))
    assert (result.outcome, result.changes) == ("ok", (ForgetUser(STRANGER),))


@pytest.mark.parametrize("tier", [None, Tier.USER, Tier.TRUSTED])
def test_forgetting_someone_else_needs_an_admin(tier: Tier | None) -> None:
    for text in ("forget <@7>", "forget me <@7>"):
        result = execute(parse_command(text), tier, state(requester_id=2))
        assert (result.outcome, result.changes) == ("denied", ())
        assert result.reply == "`forget` needs an admin or higher."


def test_an_admin_forgets_users_and_the_owner_alone_forgets_admins_and_the_owner() -> None:
    _, changes, outcome = run("forget <@2> <@3> me", requester_id=ADMIN_ID)
    assert (outcome, changes) == ("ok", (ForgetUser(ADMIN_ID), ForgetUser(2), ForgetUser(3)))
    for text in ("forget <@4>", f"forget <@{OWNER}>"):
        reply, changes, outcome = run(text, requester_id=5, trust={5: "admin", 4: "admin"})
        assert (outcome, changes) == ("denied", ())
        assert reply.startswith("Only the owner can make me forget")
    _, changes, outcome = run("forget <@4> me")
    assert (outcome, changes) == ("ok", (ForgetUser(OWNER), ForgetUser(4)))


def test_a_bare_forget_shows_its_usage_to_every_trusted_tier() -> None:
    reply, _, outcome = run("forget", Tier.USER, requester_id=2)
    assert outcome == "error"
    assert "`forget me`" in reply
    result = execute(parse_command("forget"), None, state(requester_id=STRANGER))
    assert result.outcome == "denied"  # a stranger learns nothing but `forget me` working


def test_forget_me_without_a_requester_is_an_error() -> None:
    _, changes, outcome = run("forget me", requester_id=None)
    assert (outcome, changes) == ("error", ())


def test_forgotten_reply_counts_messages_and_observations() -> None:
    done = [Forgotten(STRANGER, 3, 1), Forgotten(7, 0, 0)]
    assert forgotten_reply(done, STRANGER) == (
        "Forgot what you said: 3 messages and 1 observation deleted. "
        "Forgot what <@7> said: 0 messages and 0 observations deleted."
    )


def test_untrusted_requesters_may_run_nothing_but_forget_me() -> None:
    for text in ("help", "whitelist list", "poll a | b | c", "speak"):
        result = execute(parse_command(text), None, state(requester_id=STRANGER))
        assert (result.outcome, result.changes) == ("denied", ())


# ----- the chat's own prompt, discriminator model and threshold (SPEC 7, 18) ------------------


def test_attention_prompt_model_and_threshold_set_the_chats_own_settings() -> None:
    reply, changes, outcome = run("attention prompt Speak like a pirate.\nBe brief.")
    assert (outcome, changes) == (
        "ok",
        (ChatSettingChange("prompt", "Speak like a pirate.\nBe brief."),),
    )
    assert reply == "This chat's agent prompt is set."
    reply, changes, _ = run("attention model claude-haiku-9")
    assert changes == (ChatSettingChange("model", "claude-haiku-9"),)
    assert reply == "This chat's discriminator model is now `claude-haiku-9`."
    reply, changes, _ = run("attention threshold 0.7")
    assert changes == (ChatSettingChange("threshold", 0.7),)
    assert reply == "This chat's confidence threshold is now `0.7`."


def test_attention_settings_return_to_the_default() -> None:
    own = ChatSettings(prompt="p", model="m", threshold=0.5, default_model="claude-haiku-5-5")
    assert run("attention prompt reset", chat=own)[1] == (ChatSettingChange("prompt", None),)
    assert run("attention model default", chat=own)[1] == (ChatSettingChange("model", None),)
    assert run("attention threshold default", chat=own)[1] == (
        ChatSettingChange("threshold", None),
    )
    # Nothing to change: said so, nothing stored.
    reply, changes, outcome = run("attention prompt reset")
    assert (reply, changes, outcome) == ("This chat already uses the owner's prompt.", (), "ok")
    assert run("attention threshold 0.5", chat=own)[1] == ()


def test_attention_show_shows_the_chats_own_settings() -> None:
    own = ChatSettings(prompt="abc", model=None, threshold=0.7, default_model="claude-haiku-5-5")
    reply = run("attention show", chat=own)[0]
    assert reply.endswith(
        "Discriminator model: `claude-haiku-5-5` (the default). Confidence threshold: `0.7`. "
        "Agent prompt: this chat's own (3 characters)."
    )


def test_attention_show_shows_users_own_modes_access_and_the_chats_own_settings() -> None:
    own = ChatSettings(prompt=None, model="claude-haiku-9", threshold=0.4)
    reply = run(
        "attention show", chat=own, user_modes={7: "always"}, access_note="channel is denied"
    )[0]
    first, *rest = reply.splitlines()
    assert first.endswith(
        "Discriminator model: `claude-haiku-9` (this chat's own). Confidence threshold: `0.4`. "
        "Agent prompt: the owner's."
    )
    assert rest == [
        "Silent here whatever the mode: the channel is denied.",
        "Users' own modes here: <@7>: `always`.",
    ]


def test_attention_help_and_errors_name_every_subcommand() -> None:
    words = ("show", "user", "prompt", "model", "threshold")
    assert all(f"attention {w}" in run("help attention")[0] for w in words)
    assert all(w in run("attention sometimes")[0] for w in words)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("attention threshold 1.5", "a number from 0 to 1"),
        ("attention threshold nan", "a number from 0 to 1"),
        ("attention threshold high", "a number from 0 to 1"),
        ("attention model", "one model id"),
        ("attention model two words", "one model id"),
        ("attention prompt", "Give the prompt's text"),
        ("attention prompt " + "x" * 8001, "at most 8000 characters"),
        ("attention prompt a\u200bb", "control or format"),
    ],
)
def test_bad_attention_values_are_one_sentence(text: str, error: str) -> None:
    reply, changes, outcome = run(text)
    assert (changes, outcome) == ((), "error")
    assert error in reply


@pytest.mark.parametrize("tier", [Tier.USER, Tier.TRUSTED])
def test_the_chats_own_settings_need_an_admin(tier: Tier) -> None:
    reply, changes, outcome = run("attention threshold 0.7", tier, requester_id=2)
    assert (changes, outcome) == ((), "denied")
    assert "needs an admin" in reply


@given(st.sampled_from(["prompt", "model", "threshold"]), st.text(min_size=1, max_size=30))
def test_chat_settings_render_back_to_themselves(field: str, text: str) -> None:
    command = parse_command(f"attention {field} {text}")
    if isinstance(command, ChatSettingSet):
        assert parse_command(render_command(command)) == command


def test_a_prompt_from_a_browser_form_keeps_its_lines() -> None:
    assert (
        parse_prompt("Speak like a pirate.\r\nBe brief.\r\n") == "Speak like a pirate.\nBe brief."
    )
