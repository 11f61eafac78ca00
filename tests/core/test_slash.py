"""The `/picortex` command tree and reading interactions into commands (SPEC 15)."""

from __future__ import annotations

from picortex.core import commands as cmds
from picortex.core import slash as sl
from picortex.core.chat_settings import ChatSettingSet
from picortex.core.trust import Tier
from picortex.types import Interaction, InteractionOption, User

ALICE = User(1, "alice")


def _run(*options: InteractionOption, name: str = "picortex", kind: int = 2) -> Interaction:
    return Interaction(1, 2, kind, "tok", 3, ALICE, guild_id=4, command_name=name, options=options)


def _sub(name: str, *args: InteractionOption, kind: int = sl.SUB_COMMAND) -> InteractionOption:
    return InteractionOption(name, kind, options=args)


def _s(name: str, value: str, kind: int = sl.STRING) -> InteractionOption:
    return InteractionOption(name, kind, value)


def _walk(options: list[dict[str, object]]) -> list[dict[str, object]]:
    found = []
    for option in options:
        found.append(option)
        found.extend(_walk(option.get("options", [])))  # type: ignore[arg-type]
    return found


def test_the_tree_keeps_discords_rules() -> None:
    for global_scope in (True, False):
        tree = sl.command_tree(global_scope=global_scope)
        assert len(tree) == 1 and tree[0]["name"] == "picortex"
        assert ("contexts" in tree[0]) is global_scope
        for option in _walk(tree[0]["options"]):
            name = str(option["name"])
            assert name == name.lower() and 1 <= len(name) <= 32
            assert 1 <= len(str(option["description"])) <= 100
            assert len(option.get("choices", [])) <= 25  # type: ignore[arg-type]
            assert len(option.get("options", [])) <= 25  # type: ignore[arg-type]
            assert not (option.get("choices") and option.get("autocomplete"))
            assert 1 <= int(option.get("max_length", 1)) <= 6000  # type: ignore[call-overload]
            values = option.get("options", [])
            required = [bool(o.get("required")) for o in values]  # type: ignore[union-attr]
            assert required == sorted(required, reverse=True)  # required options come first


def test_the_hash_changes_with_scope_application_and_tree() -> None:
    tree = sl.command_tree(global_scope=True)
    same = sl.tree_hash(1, "global", tree)
    assert same == sl.tree_hash(1, "global", sl.command_tree(global_scope=True))
    assert same != sl.tree_hash(2, "global", tree)
    assert same != sl.tree_hash(1, "guild:5", tree)
    assert same != sl.tree_hash(1, "global", sl.command_tree(global_scope=False))


def test_interactions_read_as_the_typed_commands() -> None:
    assert sl.action_for(_run(_sub("ask", _s("text", " hi there ")))) == sl.Ask("hi there")
    assert sl.action_for(_run(_sub("attention"))) == cmds.AttentionShow()
    assert sl.action_for(_run(_sub("attention", _s("mode", "show")))) == cmds.AttentionShow()
    assert sl.action_for(_run(_sub("attention", _s("mode", "silent")))) == cmds.AttentionSet(
        "silent"
    )
    add = _sub(
        "whitelist",
        _sub("add", _s("user", "7", sl.USER), _s("user2", "8", sl.USER), _s("tier", "admin")),
        kind=sl.SUB_COMMAND_GROUP,
    )
    assert sl.action_for(_run(add)) == cmds.WhitelistAdd((7, 8), Tier.ADMIN)
    remove = _sub("whitelist", _sub("remove", _s("user", "7", sl.USER)), kind=sl.SUB_COMMAND_GROUP)
    assert sl.action_for(_run(remove)) == cmds.WhitelistRemove((7,))
    listed = _sub("whitelist", _sub("list"), kind=sl.SUB_COMMAND_GROUP)
    assert sl.action_for(_run(listed)) == cmds.WhitelistList()
    get = _sub("config", _sub("get", _s("key", "Wakeword")), kind=sl.SUB_COMMAND_GROUP)
    assert sl.action_for(_run(get)) == cmds.ConfigGet("wakeword")
    set_ = _sub("config", _sub("set", _s("key", "poll_seconds"), _s("value", "30")), kind=2)
    assert sl.action_for(_run(set_)) == cmds.ConfigSet("poll_seconds", "30")
    poll = _sub("poll", _s("question", "Lunch?"), _s("option1", "A"), _s("option2", "B"))
    assert sl.action_for(_run(poll)) == cmds.PollStart("Lunch?", ("A", "B"))
    assert sl.action_for(_run(_sub("help", _s("topic", "poll")))) == cmds.Help("poll")
    assert sl.action_for(_run(_sub("forget"))) == cmds.Forget(me=True)
    forget = _sub("forget", _s("user", "7", sl.USER))
    assert sl.action_for(_run(forget)) == cmds.Forget((7,))
    assert sl.action_for(_run(_sub("help", _s("topic", "forget")))) == cmds.Help("forget")


def test_the_tree_offers_forget_with_an_optional_user() -> None:
    (command,) = sl.command_tree(global_scope=True)
    (forget,) = [o for o in command["options"] if o["name"] == "forget"]
    assert forget["type"] == sl.SUB_COMMAND
    assert forget["options"] == [
        {"type": sl.USER, "name": "user", "description": "Whom to forget (default: you)"}
    ]


def test_bad_input_is_one_sentence_never_an_exception() -> None:
    assert isinstance(sl.action_for(_run(_sub("ask", _s("text", "  ")))), cmds.Invalid)
    bad_mode = sl.action_for(_run(_sub("attention", _s("mode", "loud"))))
    assert isinstance(bad_mode, cmds.Invalid)
    one_option = _sub("poll", _s("question", "Q"), _s("option1", "A"))
    assert isinstance(sl.action_for(_run(one_option)), cmds.Invalid)
    no_user = _sub("whitelist", _sub("add"), kind=sl.SUB_COMMAND_GROUP)
    assert isinstance(sl.action_for(_run(no_user)), cmds.Invalid)
    assert sl.action_for(_run(name="other")) == sl.NotOurs("other")
    assert sl.action_for(_run()) == cmds.Help()
    assert sl.action_for(_run(_sub("dance"))) == cmds.Unknown("dance")


def test_autocomplete_offers_matching_config_keys() -> None:
    typed = InteractionOption("key", sl.STRING, "disc", focused=True)
    got = sl.autocomplete_choices(
        _run(_sub("config", _sub("get", typed), kind=2), kind=4),
        ("wakeword", "discriminator.model", "attention.dm", "discriminator.history"),
    )
    assert [c["value"] for c in got] == ["discriminator.model", "discriminator.history"]
    keys = tuple(f"key{n}" for n in range(40))
    empty = InteractionOption("key", sl.STRING, "", focused=True)
    assert (
        len(sl.autocomplete_choices(_run(_sub("config", _sub("get", empty)), kind=4), keys)) == 25
    )


def test_interaction_tokens_are_redacted() -> None:
    from picortex.core.redact import redact, redact_json_bytes

    token = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5OnNlY3JldC1wYXJ0LWhlcmU"
    line = f"POST /interactions/1/{token}/callback failed"
    assert token not in redact(line) and "[redacted]" in redact(line)
    assert token.encode() not in redact_json_bytes(f'{{"u": "{token}"}}'.encode())


def test_one_rule_says_which_slash_answers_only_the_requester_sees() -> None:
    private = sl.answer_is_private
    assert not private("whitelist", trusted=True, ok=True, target="channel")
    assert private("whitelist", trusted=False, ok=True, target="channel")  # a stranger's
    assert private("whitelist", trusted=True, ok=False, target="channel")  # a refusal
    assert private("forget", trusted=True, ok=True, target="channel")  # sensitive
    assert private("config", trusted=True, ok=True, target="dm")  # the policy says DM
    assert not private("ask", trusted=True, ok=True, target="dm")  # stays where asked


def test_attention_user_and_access_read_as_the_typed_commands() -> None:
    bob = _s("user", "7", sl.USER)
    own = _run(_sub("attention", _s("mode", "always"), bob))
    assert sl.action_for(own) == cmds.AttentionUser((7,), "always")
    drop = _run(_sub("attention", _s("mode", "default"), bob))
    assert sl.action_for(drop) == cmds.AttentionUser((7,), None)
    assert isinstance(sl.action_for(_run(_sub("attention", bob))), cmds.Invalid)
    assert sl.action_for(_run(_sub("access"))) == cmds.AccessShow()
    role = _run(_sub("access", _s("action", "allow-role"), _s("role", "55", sl.ROLE)))
    assert sl.action_for(role) == cmds.AccessEdit("allow-role", (55,))
    channel = _run(_sub("access", _s("action", "deny-channel"), _s("channel", "77", sl.CHANNEL)))
    assert sl.action_for(channel) == cmds.AccessEdit("deny-channel", (77,))
    assert isinstance(sl.action_for(_run(_sub("access", _s("action", "remove")))), cmds.Invalid)
    (command,) = sl.command_tree(global_scope=True)
    (access,) = [o for o in command["options"] if o["name"] == "access"]
    assert [o["type"] for o in access["options"]] == [sl.STRING, sl.ROLE, sl.CHANNEL]


def test_attention_sets_the_chats_own_prompt_model_and_threshold() -> None:
    def act(*args: InteractionOption) -> object:
        return sl.action_for(_run(_sub("attention", *args)))

    assert act(_s("prompt", "Speak like a pirate.")) == ChatSettingSet(
        "prompt", "Speak like a pirate."
    )
    assert act(_s("prompt", "reset")) == ChatSettingSet("prompt", None)
    assert act(_s("model", "claude-haiku-9")) == ChatSettingSet("model", "claude-haiku-9")
    assert act(_s("threshold", "0.7")) == ChatSettingSet("threshold", 0.7)
    assert act(_s("threshold", "default")) == ChatSettingSet("threshold", None)
    assert act(_s("threshold", "2")) == cmds.Invalid(
        "attention", "The threshold is a number from 0 to 1, or `default`."
    )
    assert act(_s("mode", "always"), _s("threshold", "0.5")) == cmds.Invalid(
        "attention", "Give one of mode, prompt, model or threshold at a time."
    )
    [attention] = [
        o for o in sl.command_tree(global_scope=False)[0]["options"] if o["name"] == "attention"
    ]
    names = [o["name"] for o in attention["options"]]
    assert names == ["mode", "user", "prompt", "model", "threshold"]
    # A user's own mode is set alone: the chat's own settings are not set on the way.
    assert act(_s("mode", "always"), _s("user", "7", sl.USER), _s("model", "m")) == cmds.Invalid(
        "attention", "Set a user's own mode alone, without the others."
    )
