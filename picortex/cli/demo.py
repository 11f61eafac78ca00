"""`picortex demo`: the simulator and the bot in one process, a scripted conversation, a transcript.

Each scene posts messages as simulated users, waits for the bot to decide (and answer), and
prints what happened with the reasons from the action log, so a newcomer sees every feature
without a Discord account or an API key.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import orjson
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.core.jsonids import as_int_id
from picortex.core.money import usd
from picortex.core.terminal import clean_text
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, ModelReply, Simulator
from picortex.sim.world import tiny_png
from picortex.web.launch import announce, until_interrupted, web_toml

# How long one scene may wait for the bot before the demo reports it and moves on.
SCENE_TIMEOUT_SECONDS: Final = 30.0
POLL_SECONDS: Final = 4.0
CONTINUATION_SECONDS: Final = 6.0
FAULT_WORD: Final = "kaboom"
SNIPPET_CHARS: Final = 160
# The offline model's pace for the streamed scene: seconds between deltas (before --speed).
STREAM_PACE_SECONDS: Final = 0.06

AGENTS_YAML: Final = """\
personas:
  - id: sleep
    name: Sandman
    description: Sleep coach with practical advice on rest, routines and insomnia.
    domain_triggers: [sleep, slept, insomnia, nap, tired]
  - id: fitness
    name: Coach
    description: Fitness coach for workouts, recovery and energy.
    domain_triggers: [workout, exercise, gym, tired]
"""
SANDMAN_PROFILE: Final = """\
You are Sandman, a calm sleep coach. You give two or three concrete, kind suggestions.
"""


@attrs.define
class _Demo:
    sim: Simulator
    bot: Bot
    world: DefaultWorld
    carol: int
    out: TextIO
    offline: bool
    names: dict[int, str] = attrs.field(factory=dict)
    seen_bot_ids: set[int] = attrs.field(factory=set)
    seen_log_lines: int = 0
    scene_no: int = 0
    # Log rows before this index belong to earlier scenes: a scene waits only on its own.
    scene_start: int = 0
    # The scene that injects a model failure on purpose sets this; others stop at one.
    failure_expected: bool = False
    model_failures: list[str] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)

    # -- output ---------------------------------------------------------------------------

    def p(self, text: str = "") -> None:
        print(clean_text(text), file=self.out, flush=True)

    def scene(self, title: str, *, failure_expected: bool = False) -> None:
        # What the last scene left in the log is printed under that scene, not this one.
        self.report()
        self.scene_no += 1
        self.scene_start = self.seen_log_lines
        self.failure_expected = failure_expected
        self.p()
        self.p(f"[{self.scene_no}] {title}")

    def where(self, channel_id: int) -> str:
        if channel_id in self.names:
            return self.names[channel_id]
        channel = self.sim.channel(channel_id)
        if channel.get("type") == 1:
            return "DM"
        name = channel.get("name") or str(channel_id)
        return f"thread '{name}'" if channel.get("type") in (10, 11, 12) else f"#{name}"

    def user(self, user_id: int) -> str:
        if user_id == self.sim.bot_user_id:
            return "picortex"
        return {self.world.alice_id: "alice", self.world.bob_id: "bob", self.carol: "carol"}.get(
            user_id, str(user_id)
        )

    # -- acting ---------------------------------------------------------------------------

    def readable(self, text: str) -> str:
        """Mentions as @names, the way Discord shows them."""
        for user_id in (self.sim.bot_user_id, self.world.alice_id, self.world.bob_id, self.carol):
            text = text.replace(f"<@{user_id}>", f"@{self.user(user_id)}")
        return text

    def say(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        shown = self.readable(content)
        if attachments:
            shown += " [attached: " + ", ".join(a["filename"] for a in attachments) + "]"
        self.p(f"  {self.where(channel_id)} {self.user(author_id)}: {shown}")
        return self.sim.post_user_message(
            channel_id, author_id, content, attachments=attachments or ()
        )

    @property
    def at(self) -> str:
        return f"<@{self.sim.bot_user_id}>"

    # -- observing ------------------------------------------------------------------------

    def log(self) -> list[dict[str, Any]]:
        self.bot.events.flush()
        path = self.bot.settings.action_log_path
        if not path.exists():
            return []
        rows = []
        for line in path.read_bytes().splitlines():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        return rows

    async def wait_for(self, what: str, predicate: Callable[[list[dict[str, Any]]], bool]) -> bool:
        """Wait until this scene's log rows satisfy `predicate`; stop at once on a model error.

        Returns False (and notes the problem) when the scene cannot go on: the model failed
        where no failure was staged, or nothing happened within SCENE_TIMEOUT_SECONDS.
        """
        if self.model_failures and self.model_failures[-1].startswith(f"{self.scene_no}:"):
            return False  # this scene already stopped on a model error
        with trio.move_on_after(SCENE_TIMEOUT_SECONDS):
            while True:
                rows = self.log()[self.scene_start :]
                if predicate(rows):
                    return True
                failure = None if self.failure_expected else _model_failure(rows)
                if failure is not None:
                    self.model_failures.append(f"{self.scene_no}: {failure}")
                    self.problems.append(f"scene {self.scene_no}: the model failed")
                    self.report()
                    self.p(f"  !! the model failed ({failure}); this scene stops here")
                    return False
                # The log is a file another task appends to: polling it is the simple way.
                await trio.sleep(0.05)
        self.problems.append(f"scene {self.scene_no}: no {what} within {SCENE_TIMEOUT_SECONDS:g} s")
        self.p(f"  !! no {what} within {SCENE_TIMEOUT_SECONDS:g} s")
        return False

    async def decided(self, message: Mapping[str, Any], count: int = 1) -> bool:
        mid = int(message["id"])

        def done(rows: list[dict[str, Any]]) -> bool:
            return (
                sum(
                    1
                    for r in rows
                    if r["event"] == "decision" and as_int_id(r.get("message_id")) == mid
                )
                >= count
            )

        return await self.wait_for("decision", done)

    async def answered(self, count: int = 1) -> bool:
        def fresh() -> list[int]:
            return [
                int(m["id"])
                for m in self.sim.bot_messages()
                if int(m["id"]) not in self.seen_bot_ids
            ]

        ok = await self.wait_for("answer", lambda _rows: len(fresh()) >= count)
        # A streamed answer is complete once its `reply` event lists its messages.
        with trio.move_on_after(SCENE_TIMEOUT_SECONDS):
            while True:
                listed = {
                    int(i)
                    for r in self.log()
                    if r["event"] == "reply"
                    for i in r.get("message_ids", ())
                }
                if listed.issuperset(fresh()):
                    break
                await trio.sleep(0.05)
        return ok

    async def replied(self, message: Mapping[str, Any]) -> bool:
        """Wait until the answer to `message` is complete (a streamed one included)."""
        mid = int(message["id"])

        def done(rows: list[dict[str, Any]]) -> bool:
            return any(
                r["event"] == "reply" and as_int_id(r.get("trigger_id")) == mid for r in rows
            )

        return await self.wait_for("complete answer", done)

    async def settle(self, seconds: float = 0.3) -> None:
        await trio.sleep(seconds)

    def report(self) -> None:
        """Print the log lines and bot messages that appeared since the last report."""
        rows = self.log()
        fresh, self.seen_log_lines = rows[self.seen_log_lines :], len(rows)
        for row in fresh:
            line = _describe(row, self)
            if line:
                self.p(f"    {line}")
        for message in self.sim.bot_messages():
            mid = int(message["id"])
            if mid in self.seen_bot_ids:
                continue
            self.seen_bot_ids.add(mid)
            text = self.readable(" ".join(str(message.get("content", "")).split()))
            if len(text) > SNIPPET_CHARS:
                text = text[: SNIPPET_CHARS - 1] + "…"
            self.p(f"  <- picortex in {self.where(int(message['channel_id']))}: {text}")


def _model_failure(rows: list[dict[str, Any]]) -> str | None:
    """The error of the first failed model call among `rows`, if any."""
    for row in rows:
        if row["event"] == "llm" and row.get("error"):
            return str(row["error"])
        if row["event"] == "cortex.invocation_failed":
            return str(row.get("error") or "invocation failed")
    return None


def _replied(rows: list[dict[str, Any]], interaction_id: int) -> bool:
    return any(
        r["event"] == "reply" and as_int_id(r.get("trigger_id")) == interaction_id for r in rows
    )


def _describe(row: Mapping[str, Any], demo: _Demo) -> str | None:
    event = row["event"]
    if event == "decision":
        return f"decision: {row.get('outcome')} ({row.get('reason')})"
    if event == "command":
        return f"command: {row.get('command')} -> {row.get('result')}"
    if event == "continuation":
        if not row.get("restart"):
            return f"continuation: context after the answer to message {row.get('parent_id')}"
        return (
            f"continuation: joins the request of message {row.get('parent_id')}"
            " (answer in progress restarted)"
        )
    if event == "persona":
        matched = ", ".join(str(m.get("id")) for m in row.get("matches", []))
        return (
            f"persona: matched {matched}; {row.get('tiebreak')}; selected {row.get('selected')}"
            f" ({row.get('thread')})"
        )
    if event == "llm":
        return (
            f"llm: {row.get('stage')} on {row.get('model')} -> {row.get('outcome')} "
            f"({usd(row.get('cost_usd'))}, {row.get('latency_ms')} ms)"
        )
    if event == "budget":
        return (
            f"budget: workspace {row.get('workspace')} spent {usd(row.get('spent_usd'))} of "
            f"{usd(row.get('ceiling_usd'))}: {row.get('action')}"
        )
    if event == "cortex.invocation_failed":
        return (
            f"invocation failed at stage {row.get('stage')}: {row.get('error')} "
            f"(error row {row.get('error_id')})"
        )
    if event == "gateway":
        extra = row.get("reason") or row.get("code") or ""
        return f"gateway: {row.get('action')} {extra}".rstrip()
    if event == "supervisor":
        if row.get("action") != "crash":
            return None
        return f"supervisor: {row.get('actor')} crashed ({row.get('error')}); restarted"
    if event == "poll":
        return f"poll: {row.get('action')} {row.get('votes', '')}".rstrip()
    if event == "interaction":
        return f"interaction: {row.get('action')} (Discord shows 'thinking...')"
    if event == "reply" and row.get("mode") == "interaction" and row.get("result") == "posted":
        private = ", only the user sees it" if row.get("ephemeral") else ""
        outcome = "refused" if row.get("refused") else "answered"
        what = row.get("command") or "not a /picortex command"
        return f"interaction {outcome} ({what}{private})"
    if event == "reply" and row.get("streamed") and row.get("result") != "failed":
        if not row.get("edits") and row.get("result") == "posted":
            return None
        parts = row.get("parts")
        edits = row.get("edits")
        cut = "; the stream was cut" if row.get("result") == "cut" else ""
        return (
            f"reply: streamed into {parts} message{'s' if parts != 1 else ''}, "
            f"edited {edits} time{'s' if edits != 1 else ''} as it grew{cut}"
        )
    if event == "reply" and row.get("result") != "posted":
        return f"reply failed: {row.get('error')}"
    del demo
    return None


_LONG_ANSWER: Final = "Give her a quiet week and a routine she can trust. " + "\n".join(
    [
        "",
        *(
            f"{n}. {tip} This matters because a cat new to a place reads every change as a "
            "possible threat, and calm repetition is what tells her the office is safe."
            for n, tip in enumerate(
                [
                    "Start her in one small room with food, water, litter and a hiding box.",
                    "Keep feeding times fixed, and let the same person feed her at first.",
                    "Let people visit one at a time; nobody picks her up in the first days.",
                    "Add a scratching post near her bed, and one near the door she watches.",
                    "Open the next room only when she eats and grooms in front of people.",
                    "Put the litter tray far from her food; cats refuse to use one too close.",
                    "Keep the cleaning crew's vacuum away from her room for the first week.",
                    "Give her high places: a shelf or cat tree lets her watch from safety.",
                    "Play with a wand toy at the same hour daily; it burns off night energy.",
                    "Book a vet check in the first fortnight, and keep her records at hand.",
                ],
                start=1,
            )
        ),
        "",
        "A feeding plan the team can share:",
        "```",
        "08:00  wet food, 1/2 pouch   (whoever opens the office)",
        "13:00  fresh water, check tray",
        "17:30  wet food, 1/2 pouch   (whoever leaves last)",
        "```",
        "Most cats settle within two or three weeks; a slower cat is not an unhappy one.",
    ]
)


async def _play(demo: _Demo, speed: float) -> None:
    w, sim = demo.world, demo.sim
    general, random_ = w.general_id, w.random_id
    at = demo.at

    demo.scene("The owner trusts a friend (whitelist replies go by DM)")
    m = demo.say(general, w.alice_id, f"{at} !s whitelist add <@{w.bob_id}>")
    await demo.decided(m)
    await demo.answered()
    demo.report()

    demo.scene("An untrusted user is ignored and costs nothing")
    calls = len(sim.model.calls)
    m = demo.say(general, demo.carol, f"{at} can you write my homework?")
    await demo.decided(m)
    demo.report()
    demo.p(f"    model calls for it: {len(sim.model.calls) - calls}")

    demo.scene("A mention gets an answer, with the channel's recent messages as context")
    demo.say(general, w.alice_id, "We are picking a name for the new office cat.")
    m = demo.say(general, w.bob_id, f"{at} what would be a good name for her?")
    await demo.decided(m)
    await demo.answered()
    demo.report()

    demo.scene("An image question (in a DM): the screenshot reaches the model as an image")
    m = demo.say(
        sim.open_dm(w.bob_id),
        w.bob_id,
        "what colour is this swatch?",
        attachments=[{"filename": "swatch.png", "data": tiny_png(8, 8, (30, 90, 200))}],
    )
    await demo.decided(m)
    await demo.replied(m)
    demo.report()

    demo.scene("A long answer streams: posted at its first sentence, then edited as it grows")
    if demo.offline:
        sim.model.script(ModelReply(text=_LONG_ANSWER, pace=STREAM_PACE_SECONDS / speed))
    m = demo.say(general, w.alice_id, f"{at} how do we help the new office cat settle in?")
    await demo.decided(m)
    await demo.replied(m)
    demo.report()

    demo.scene("A follow-up inside the continuation window joins the same request")
    calls = len(sim.model.calls)
    if demo.offline:
        sim.model.script(ModelReply(delay=1.5 / speed))
    m = demo.say(general, w.bob_id, f"{at} suggest a weekend hike")
    if demo.offline:
        # The follow-up comes while the answer is being written, whatever the speed.
        await demo.wait_for("model call", lambda _rows: len(sim.model.calls) > calls)
    else:
        await demo.settle(0.3)
    f = demo.say(general, w.bob_id, "somewhere near water, under 10 km")
    await demo.decided(m)
    await demo.decided(f)
    await demo.answered()
    await demo.settle(0.5)
    demo.report()

    demo.scene("attention discriminate: a classifier decides when nobody mentions the bot")
    m = demo.say(random_, w.alice_id, f"{at} !s attention discriminate")
    await demo.decided(m)
    await demo.answered()
    demo.report()
    m = demo.say(random_, w.bob_id, "the weather is lovely today")
    await demo.decided(m)
    demo.report()
    m = demo.say(random_, w.bob_id, "does anyone know how to fix a squeaky door?")
    await demo.decided(m)
    await demo.answered()
    demo.report()

    demo.scene("Slash commands: /picortex ask says 'thinking...', then edits in the answer")
    await demo.wait_for("slash command registration", lambda _rows: bool(sim.app_commands()))
    ask = sim.run_slash(random_, w.bob_id, "picortex ask which houseplant is hardest to kill?")
    await demo.wait_for("slash answer", lambda rows: _replied(rows, ask.id))
    demo.report()
    refused = sim.run_slash(random_, demo.carol, "picortex ask write my homework")
    await demo.wait_for("slash refusal", lambda rows: _replied(rows, refused.id))
    demo.report()
    demo.p(f"    only carol sees: {refused.text}")

    demo.scene("Two personas match: one tiebreak call picks one, which answers in a thread")
    m = demo.say(general, w.bob_id, f"{at} I slept terribly last night and I'm so tired")
    await demo.decided(m)
    await demo.answered()
    await demo.settle()
    demo.report()

    demo.scene("A poll: votes are reactions, the result comes after poll_seconds")
    m = demo.say(general, w.alice_id, f'{at} !s poll "Pizza or tacos on Friday?" pizza // tacos')
    await demo.decided(m)
    await demo.answered()
    demo.report()
    poll_msg = sim.bot_messages(general)[-1]
    sim.add_reaction(
        general,
        int(poll_msg["id"]),
        w.bob_id,
        "2\N{VARIATION SELECTOR-16}\N{COMBINING ENCLOSING KEYCAP}",
    )
    sim.add_reaction(
        general,
        int(poll_msg["id"]),
        w.alice_id,
        "2\N{VARIATION SELECTOR-16}\N{COMBINING ENCLOSING KEYCAP}",
    )
    demo.p("  (bob and alice vote 2, tacos)")
    await demo.wait_for(
        "poll result",
        lambda rows: any(r["event"] == "poll" and r.get("action") == "result" for r in rows),
    )
    await demo.answered()
    demo.report()

    demo.scene("The owner's voice: this chat's own agent prompt shapes the answer")
    m = demo.say(
        general,
        w.alice_id,
        f"{at} !s attention prompt You are the office parrot of {{{{server_name}}}}.\n"
        "Sign off: -- Captain Pico",
    )
    await demo.decided(m)
    await demo.answered()
    demo.report()
    m = demo.say(general, w.bob_id, f"{at} what should we call the meeting room?")
    await demo.decided(m)
    await demo.replied(m)
    demo.report()

    demo.scene(
        "A model failure (injected on purpose) becomes an error row; the bot carries on",
        failure_expected=True,
    )
    dm = sim.open_dm(w.bob_id)
    m = demo.say(dm, w.bob_id, f"tell me about {FAULT_WORD} physics")
    await demo.wait_for(
        "invocation failure",
        lambda rows: any(r["event"] == "cortex.invocation_failed" for r in rows),
    )
    demo.report()
    del m

    demo.scene("The gateway drops; the bot resumes and misses nothing")
    sim.hold_events(True)
    sim.drop_connections()
    m = demo.say(general, w.bob_id, f"{at} are you still there?")
    sim.hold_events(False)
    await demo.wait_for(
        "resume",
        lambda rows: any(r["event"] == "gateway" and r.get("action") == "resumed" for r in rows),
    )
    await demo.decided(m)
    await demo.answered()
    demo.report()

    demo.scene("A user's own attention mode beats the chat's: bob needs no mention in #random")
    m = demo.say(random_, w.alice_id, f"{at} !s attention user <@{w.bob_id}> always")
    await demo.decided(m)
    await demo.answered()
    demo.report()
    m = demo.say(random_, w.bob_id, "any tips for keeping basil alive on a windowsill?")
    await demo.decided(m)
    await demo.answered()
    demo.report()

    demo.scene("A budget ceiling is reached: no more model calls in this workspace")
    m = demo.say(general, w.alice_id, f"{at} !s config set budget.ceiling_usd 0.000001")
    await demo.decided(m)
    await demo.answered()
    demo.report()
    m = demo.say(general, w.bob_id, f"{at} one more question: why is the sky blue?")
    await demo.wait_for("budget event", lambda rows: any(r["event"] == "budget" for r in rows))
    await demo.decided(m)
    demo.report()


def run_demo(
    *,
    keep: bool,
    speed: float,
    out: TextIO,
    env: Mapping[str, str] | None = None,
    offline: bool = False,
    web: bool = False,
) -> int:
    """Play the demo; returns 0 when every scene did what it shows.

    With `offline` the simulator's model endpoint is used even when ANTHROPIC_API_KEY is set.
    With `web`, the panel is served against the simulator and stays up until Ctrl-C.
    """
    if speed <= 0:
        speed = 1.0
    environ = dict(os.environ if env is None else env)
    home = Path(tempfile.mkdtemp(prefix="picortex-demo-"))
    # The transcript tells the story; warnings and crash tracebacks of the scenes staged on
    # purpose would only interrupt it (they are all in the action log).
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        code = trio.run(_main, home, speed, out, environ, keep, offline, web)
    finally:
        root.setLevel(level)
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
    if keep:
        print(f"\nThe demo home is kept: {home}", file=out)
    return code


async def _main(
    home: Path,
    speed: float,
    out: TextIO,
    environ: Mapping[str, str],
    keep: bool,
    offline: bool,
    web: bool,
) -> int:
    real_key = None if offline else environ.get("ANTHROPIC_API_KEY")
    sim = Simulator(heartbeat_interval_ms=5000)
    world = sim.add_default_world()
    carol = sim.add_user("carol", global_name="Carol")
    (home / "agents.yaml").write_text(AGENTS_YAML, encoding="utf-8")
    (home / "personas").mkdir()
    (home / "personas" / "sleep.md").write_text(SANDMAN_PROFILE, encoding="utf-8")
    (home / "picortex.toml").write_text(
        textwrap.dedent(
            f"""\
            continuation_seconds = {CONTINUATION_SECONDS / speed:g}
            poll_enabled = true
            poll_seconds = {POLL_SECONDS / speed:g}
            [budget]
            # The script packs a conversation of minutes into seconds: a per-minute limit
            # would only measure the script's pace.
            user_requests_per_minute = 0
            """
        )
        + web_toml(web),
        encoding="utf-8",
    )
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        bot_env = {
            "PICORTEX_HOME": str(home),
            "DISCORD_BOT_TOKEN": sim.token,
            "DISCORD_API_BASE": urls.api_base,
            "PICORTEX_OWNER_ID": str(world.alice_id),
            "PICORTEX_FAULT_INJECT": f"llm:{FAULT_WORD}",
        }
        if real_key:
            bot_env["ANTHROPIC_API_KEY"] = real_key
            if environ.get("ANTHROPIC_BASE_URL"):
                bot_env["ANTHROPIC_BASE_URL"] = environ["ANTHROPIC_BASE_URL"]
        else:
            bot_env["ANTHROPIC_API_KEY"] = "offline-demo-key"
            bot_env["ANTHROPIC_BASE_URL"] = urls.anthropic_base_url
        bot = Bot(
            load_settings(bot_env),
            gateway_timings=GatewayTimings(backoff_base=0.1, backoff_cap=1.0),
        )
        demo = _Demo(sim, bot, world, carol, out, offline=not real_key)
        demo.p("picortex demo")
        if real_key:
            demo.p(
                "model: real Claude (ANTHROPIC_API_KEY is set; `picortex demo --offline` uses "
                "the simulator's offline model instead)"
            )
        else:
            why = "--offline" if offline else "ANTHROPIC_API_KEY is not set"
            demo.p(
                f"model: the simulator's OFFLINE model endpoint ({why}), a stand-in that echoes "
                "and follows simple rules"
            )
        demo.p(f"Discord: the built-in simulator at {urls.api_base}")
        demo.p("cast: alice (the owner), bob (a friend, not yet trusted), carol (untrusted)")
        await nursery.start(bot.run)
        await sim.wait_ready()
        await demo.wait_for(
            "gateway ready",
            lambda rows: any(r["event"] == "gateway" and r.get("action") == "ready" for r in rows),
        )
        demo.report()
        await announce(bot, out)
        await _play(demo, speed)
        if web:
            demo.p()
            demo.p("The panel stays up against the simulator: press Ctrl-C to stop.")
            await until_interrupted()
        nursery.cancel_scope.cancel()
    settings = bot.settings
    demo.p()
    demo.p("Done. Everything above is in the action log and the database:")
    demo.p(f"  action log: {settings.action_log_path}")
    demo.p(f"  database:   {settings.db_path}")
    if keep:
        demo.p("Inspect them with:")
        demo.p(f"  PICORTEX_HOME={settings.home} picortex log -n 30")
        demo.p(f"  PICORTEX_HOME={settings.home} picortex log --event decision")
        demo.p(f"  PICORTEX_HOME={settings.home} picortex errors")
        demo.p(f"  PICORTEX_HOME={settings.home} picortex prompts history {demo.world.random_id}")
    else:
        demo.p("The demo home is deleted on exit; run `picortex demo --keep` to inspect it with")
        demo.p("`picortex log`, `picortex errors` and `picortex prompts history`.")
    if demo.problems:
        demo.p()
        demo.p("Some scenes did not finish: " + "; ".join(demo.problems))
        if demo.model_failures:
            first = demo.model_failures[0].partition(": ")[2]
            demo.p(f"The model calls failed ({first}).")
            demo.p(
                "Check ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL), or run `picortex demo "
                "--offline` to use the simulator's offline model."
            )
        return 1
    return 0


def command(args: argparse.Namespace) -> int:
    """Play the demo."""
    return run_demo(
        keep=args.keep, speed=args.speed, out=sys.stdout, offline=args.offline, web=args.web
    )
