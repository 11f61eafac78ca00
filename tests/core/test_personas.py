"""Personas: agents.yaml validation, trigger matching, tiebreak, recall terms, prompts."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from picortex.core.personas import (
    Persona,
    PersonaSet,
    fts_query,
    match,
    parse_agents,
    parse_tiebreak,
    persona_prompt,
    salient_terms,
    tiebreak_prompt,
)
from picortex.errors import ConfigError

AGENTS = """\
personas:
  - id: sleep
    name: Arnold
    description: A calm sleep coach.
    domain_triggers: [sleep, slept, insomnia, "can't sleep", tired]
  - id: fitness
    name: Bea
    description: A cheerful trainer.
    domain_triggers: [workout, gym, tired, "leg day"]
    model: complex
"""


def personas() -> PersonaSet:
    return parse_agents(AGENTS, "agents.yaml", {"sleep": "You are Arnold, who loves naps.\n"})


def test_parse_agents_reads_entries_and_profiles() -> None:
    ps = personas()
    assert ps.ids == ("sleep", "fitness")
    sleep = ps.get("sleep")
    assert sleep is not None
    assert sleep.name == "Arnold"
    assert sleep.domain_triggers == ("sleep", "slept", "insomnia", "can't sleep", "tired")
    assert sleep.model is None
    assert sleep.profile == "You are Arnold, who loves naps."
    fitness = ps.get("fitness")
    assert fitness is not None
    assert fitness.model == "complex"
    assert fitness.profile is None
    assert len(ps) == 2
    assert [p.id for p in ps] == ["sleep", "fitness"]
    assert ps.get("nope") is None


@pytest.mark.parametrize("text", ["", "# nothing\n", "personas:\n", "personas: []\n"])
def test_no_personas(text: str) -> None:
    assert len(parse_agents(text, "agents.yaml", {})) == 0


ENTRY = "  - id: sleep\n    name: Arnold\n    description: d\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("personas: [\n", "agents.yaml: is not valid YAML at line 2, column 1"),
        ("- a\n- b\n", "agents.yaml: must be a mapping with a personas: list"),
        ("personas: hello\n", "agents.yaml: personas: must be a list of entries"),
        ("personas:\n  - just a string\n", "agents.yaml: persona #1 is not a mapping"),
        (
            "personas:\n  - name: Arnold\n    description: d\n    domain_triggers: [a]\n",
            "agents.yaml: persona #1 has no id",
        ),
        ("personas:\n" + ENTRY, 'agents.yaml: persona #1 ("sleep") has no domain_triggers'),
        (
            "personas:\n" + ENTRY + "    domain_triggers: []\n",
            'agents.yaml: persona #1 ("sleep") has no domain_triggers',
        ),
        (
            "personas:\n" + ENTRY + "    domain_triggers: sleep\n",
            'agents.yaml: persona #1 ("sleep") has domain_triggers that are not a list',
        ),
        (
            "personas:\n" + ENTRY + "    domain_triggers: [sleep, yes]\n",
            'agents.yaml: persona #1 ("sleep") has a domain trigger that is not text (True)',
        ),
        (
            "personas:\n" + ENTRY + "    domain_triggers: [sleep, '  ']\n",
            'agents.yaml: persona #1 ("sleep") has an empty domain trigger',
        ),
        (
            "personas:\n" + ENTRY + "    domain_triggers: [a]\n    model: huge\n",
            "agents.yaml: persona #1 (\"sleep\") has model 'huge'; use one of triage",
        ),
        (
            "personas:\n  - id: sleep\n    description: d\n    domain_triggers: [a]\n",
            'agents.yaml: persona #1 ("sleep") has no name',
        ),
        (
            "personas:\n  - id: x\n    name: [1]\n    description: d\n    domain_triggers: [a]\n",
            'agents.yaml: persona #1 ("x") has a name that is not text',
        ),
        (
            "personas:\n  - id: ../etc\n    name: n\n    description: d\n"
            "    domain_triggers: [a]\n",
            'agents.yaml: persona #1 ("../etc") has an id with characters other than',
        ),
    ],
)
def test_parse_agents_errors_name_file_and_entry(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_agents(text, "agents.yaml", {})
    assert str(info.value).startswith(message)


def test_duplicate_ids_are_rejected() -> None:
    text = AGENTS + "  - id: Sleep\n    name: N\n    description: d\n    domain_triggers: [z]\n"
    with pytest.raises(ConfigError, match=r'persona #3 \("Sleep"\) repeats the id of persona #1'):
        parse_agents(text, "agents.yaml", {})


def test_persona_2_missing_triggers_message() -> None:
    text = (
        "personas:\n  - id: a\n    name: A\n    description: d\n    domain_triggers: [x]\n"
        "  - id: sleep\n    name: S\n    description: d\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_agents(text, "agents.yaml", {})
    assert str(info.value) == 'agents.yaml: persona #2 ("sleep") has no domain_triggers'


# -- matching ---------------------------------------------------------------------------------


def ids(text: str) -> list[str]:
    return [m.persona.id for m in match(personas(), text)]


def test_seed_example_matches_the_sleep_persona() -> None:
    found = match(personas(), "I slept terribly last night")
    assert [(m.persona.id, m.trigger, m.strength) for m in found] == [("sleep", "slept", 1)]


def test_whole_words_only() -> None:
    assert ids("sleeping in") == []
    assert ids("asleep") == []
    assert ids("gymnastics") == []
    assert ids("gym.") == ["fitness"]
    assert ids("(insomnia)") == ["sleep"]


def test_case_and_spacing_and_curly_quotes() -> None:
    assert ids("I CAN\u2019T   SLEEP at all") == ["sleep"]
    assert ids("LEG\nDAY!") == ["fitness"]


def test_strength_orders_matches_and_ties_keep_file_order() -> None:
    assert ids("so tired") == ["sleep", "fitness"]
    found = match(personas(), "tired after leg day at the gym")
    assert [m.persona.id for m in found] == ["fitness", "sleep"]
    assert found[0].strength == 4  # "leg day" (2) + gym (1) + tired (1)
    assert found[0].trigger == "leg day"
    assert found[0].triggers == ("gym", "tired", "leg day")


def test_unicode_triggers() -> None:
    ps = PersonaSet(
        (
            Persona("cook", "Chef", "d", ("crème brûlée", "Straße")),
            Persona("ru", "Ru", "d", ("сон",)),
            Persona("hi", "Hi", "d", ("नींद",)),
        )
    )
    assert [m.persona.id for m in match(ps, "CRÈME BRÛLÉE tonight")] == ["cook"]
    decomposed = "cre\u0300me bru\u0302le\u0301e"
    assert [m.persona.id for m in match(ps, decomposed)] == ["cook"]
    assert [m.persona.id for m in match(ps, "die STRASSE")] == ["cook"]
    shouted = "\u0421\u041e\u041d"  # the trigger in capitals
    assert [m.persona.id for m in match(ps, f"Плохой {shouted}")] == ["ru"]
    assert match(ps, "сонный") == []
    assert [m.persona.id for m in match(ps, "मुझे नींद नहीं आती")] == ["hi"]
    assert match(ps, "cafe") == []


# Turkish dotless i uppercases to I, which Unicode's default case folding maps to i: the one
# letter whose case cannot round-trip without knowing the language.
letters = st.characters(categories=["Lu", "Ll", "Lt", "Lm", "Lo"], exclude_characters="\u0131")
words = st.text(letters, min_size=1, max_size=8)


@given(words, st.sampled_from([str.upper, str.lower, str.title, str.swapcase, str.casefold]))
def test_any_word_matches_in_any_case(word: str, change: object) -> None:
    assert callable(change)
    changed = change(word)
    assume(isinstance(changed, str))
    ps = PersonaSet((Persona("p", "P", "d", (word,)),))
    assert [m.persona.id for m in match(ps, f"well, {changed}!")] == ["p"]


@given(words)
def test_a_word_inside_a_longer_word_does_not_match(word: str) -> None:
    ps = PersonaSet((Persona("p", "P", "d", (word,)),))
    assert match(ps, f"q{word}q") == []
    assert match(ps, f"{word}7") == []


@given(st.lists(words, min_size=1, max_size=3), st.lists(words, max_size=3))
def test_a_phrase_matches_with_any_spacing(phrase: list[str], noise: list[str]) -> None:
    ps = PersonaSet((Persona("p", "P", "d", (" ".join(phrase),)),))
    text = " ".join([*noise, "\n\t ".join(w.upper() for w in phrase), *noise])
    assert [m.persona.id for m in match(ps, text)] == ["p"]


# -- tiebreak ---------------------------------------------------------------------------------


def test_tiebreak_prompt_lists_candidates() -> None:
    ps = personas()
    system, user = tiebreak_prompt("so tired", list(ps))
    assert "id" in system
    assert "so tired" in user
    assert "- sleep: Arnold. A calm sleep coach." in user
    assert "- fitness: Bea. A cheerful trainer." in user


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("sleep", "sleep"),
        ("  Sleep\n", "sleep"),
        ('"fitness"', "fitness"),
        ("`fitness`.", "fitness"),
        ("**sleep**", "sleep"),
        ("«sleep»", "sleep"),
        ("sleep-coach", "sleep-coach"),
        ("The answer is sleep", None),
        ("sleep or fitness", None),
        ("", None),
        ("...", None),
        ("arnold", None),
    ],
)
def test_parse_tiebreak(answer: str, expected: str | None) -> None:
    assert parse_tiebreak(answer, ["sleep", "fitness", "sleep-coach"]) == expected


# -- recall and prompts -----------------------------------------------------------------------


def test_salient_terms() -> None:
    assert salient_terms("I slept terribly last night") == ["terribly", "slept", "night"]
    assert salient_terms("The the THE") == []
    assert salient_terms("sleep sleep insomnia and melatonin", max_terms=2) == [
        "sleep",
        "melatonin",
    ]
    mention = salient_terms("<@123456789012345678> error 404 in https://example.com/x")
    assert mention == ["example", "error", "404"]
    assert salient_terms("Schlaf ist wichtig für Kinder") == [
        "wichtig",
        "schlaf",
        "kinder",
        "ist",
        "für",
    ]
    assert salient_terms("睡眠 不足") == ["睡眠", "不足"]
    assert salient_terms("anything", max_terms=0) == []


def test_fts_query_quotes_terms() -> None:
    assert fts_query(["sleep", 'say "hi"', ""]) == '"sleep" OR "say ""hi"""'
    assert fts_query([]) == ""


def test_persona_prompt_uses_profile_recall_and_recent_lines() -> None:
    sleep = personas().get("sleep")
    assert sleep is not None
    recent = [f"10:0{i} bob: line {i}" for i in range(8)]
    system, messages = persona_prompt(sleep, ["bob slept badly on Monday"], recent, "bob: help")
    assert system.startswith("You are Arnold, who loves naps.")
    assert "as Arnold" in system
    assert len(messages) == 1
    assert messages[0]["role"] == "user"
    content = messages[0]["content"]
    assert "- bob slept badly on Monday" in content
    assert "line 2" not in content  # only the last 5 recent lines
    assert "line 3" in content
    assert "line 7" in content
    assert content.endswith("The message to answer:\nbob: help")


def test_persona_prompt_without_profile_or_context() -> None:
    fitness = personas().get("fitness")
    assert fitness is not None
    system, messages = persona_prompt(fitness, [], [], "leg day?")
    assert system.startswith("You are Bea. A cheerful trainer.")
    assert messages == [{"role": "user", "content": "The message to answer:\nleg day?"}]


def test_an_unknown_top_level_key_is_a_warning_not_silence() -> None:
    text = "persona:\n  - id: sleep\n    name: S\n    description: d\n    domain_triggers: [x]\n"
    found = parse_agents(text, "agents.yaml", {})
    assert len(found) == 0
    assert found.warnings == (
        "agents.yaml: unknown key persona: is ignored (the list of personas goes under personas:)",
    )
    assert parse_agents("personas: []\n", "agents.yaml", {}).warnings == ()
