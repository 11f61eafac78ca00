"""The panel in a real headless Chromium, against the bot and the simulator."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveBot, screenshot


def log_in(page: Page, live: LiveBot) -> None:
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.get_by_label("Panel token").fill(live.token)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def test_log_in_and_see_the_overview(page: Page, live: LiveBot) -> None:
    page.goto("/login")
    screenshot(page, "panel-login")
    page.get_by_label("Panel token").fill("not the token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_text("That is not the panel's token.")
    log_in(page, live)
    expect(page.locator("#gateway-state")).to_have_text("ready")
    run = live.running
    live.say(run.world.general_id, run.world.alice_id, f"{run.mention()} how are you?")
    live.wait_event("reply", result="posted")
    page.reload()
    expect(page.locator("svg.chart")).to_be_visible()
    screenshot(page, "panel-overview")


def test_switch_attention_mode_by_radio(page: Page, live: LiveBot) -> None:
    run = live.running
    general = run.world.general_id
    log_in(page, live)
    page.get_by_role("link", name="Chats").click()
    screenshot(page, "panel-chats")
    page.get_by_role("link", name="general", exact=False).first.click()
    expect(page.get_by_role("heading", name=re.compile("general"))).to_be_visible()
    page.locator("#attention-form").get_by_label("always").check()
    page.locator("#attention-form").get_by_role("button", name="Set mode").click()
    expect(page.get_by_role("status")).to_contain_text("Attention mode is now always")
    expect(page.locator("#attention-form").get_by_label("always")).to_be_checked()
    command = live.wait_event("command", source="web", command="attention")
    assert command[-1]["result"] == "ok"
    # The bot now answers alice in #general without a mention.
    asked = live.say(general, run.world.alice_id, "no mention, answer anyway")
    live.wait_until(lambda r: bool(r.replies_to(int(asked))))


def test_edit_and_save_the_prompt_then_see_it_in_history(page: Page, live: LiveBot) -> None:
    general = live.running.world.general_id
    log_in(page, live)
    page.goto(f"/chats/{general}")
    editor = page.get_by_label("Discriminator prompt")
    text = editor.input_value()
    assert "should_respond" in text
    editor.fill(text + "Stay quiet about the weather.\n")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.get_by_role("status")).to_have_text(
        "Saved the discriminator prompt as a new version."
    )
    newest = page.locator("#versions > li").first
    expect(newest).to_contain_text("Prompt edited in the web panel")
    expect(newest.locator("ins")).to_have_text("+Stay quiet about the weather.")
    expect(page.locator("#versions > li")).to_have_count(2)
    screenshot(page, "panel-chat")


def test_give_a_chat_its_own_agent_prompt_and_hear_it(page: Page, live: LiveBot) -> None:
    run = live.running
    general = run.world.general_id
    log_in(page, live)
    page.goto(f"/chats/{general}")
    page.get_by_label("Agent prompt").fill("You are {{bot_name}}.\nSign off: -- Panel Pico")
    page.get_by_role("button", name="Save the agent prompt").click()
    expect(page.get_by_role("status")).to_have_text("This chat's agent prompt is set.")
    expect(page.locator("#agent-versions > li").first).to_contain_text("Agent prompt set")
    asked = live.say(general, run.world.alice_id, f"{run.mention()} hello")
    live.wait_until(lambda r: bool(r.replies_to(int(asked))))
    [reply] = live.call(run.replies_to, int(asked))
    assert reply["content"].endswith("-- Panel Pico")


def test_run_the_discriminator_test(page: Page, live: LiveBot) -> None:
    run = live.running
    general = run.world.general_id
    live.say(general, run.world.alice_id, "the weather is fine")
    last = live.say(general, run.world.alice_id, "is anyone around?")
    live.wait_until(lambda r: any(m.id == int(last) for m in r.bot.cache.recent(general, 50)))
    log_in(page, live)
    page.goto(f"/chats/{general}")
    page.get_by_label(re.compile("Last")).fill("2")
    page.get_by_role("button", name="Test discriminator").click()
    rows = page.locator("#test-results tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator(".decision")).to_have_text("skip")
    expect(rows.nth(1).locator(".decision")).to_have_text("respond")
    expect(rows.nth(1)).to_contain_text("asks a question")
    expect(rows.nth(1)).to_contain_text("$0.0000")
    screenshot(page, "panel-discriminator-test")


def test_find_why_a_message_was_ignored(page: Page, live: LiveBot) -> None:
    run = live.running
    carol = live.call(run.sim.add_user, "carol", global_name="Carol")
    ignored = live.say(run.world.general_id, carol, f"{run.mention()} please answer me")
    live.wait_event("decision", outcome="ignore")
    log_in(page, live)
    page.get_by_role("link", name="Activity").click()
    page.get_by_label("Message id").fill(ignored)
    page.get_by_role("button", name="Filter").click()
    event = page.locator("li.event").first
    expect(event.locator(".decision")).to_have_text("ignore")
    expect(event.locator(".reason")).to_have_text("untrusted author: never answered")
    expect(event.locator("blockquote.message")).to_have_text("Carol: @picortex please answer me")
    screenshot(page, "panel-activity")


def test_trust_a_user_and_see_the_bot_answer_them(page: Page, live: LiveBot) -> None:
    run = live.running
    general = run.world.general_id
    carol = live.call(run.sim.add_user, "carol", global_name="Carol")
    first = live.say(general, carol, f"{run.mention()} hello?")
    live.wait_event("decision", outcome="ignore")
    log_in(page, live)
    page.get_by_role("link", name="Trust").click()
    form = page.locator("#trust-form")
    form.get_by_label("User id").fill(str(carol))
    form.get_by_label("Tier").select_option("user")
    form.get_by_role("button", name="Add").click()
    expect(page.get_by_role("status")).to_contain_text("Added as user")
    expect(page.locator("#trust-table")).to_contain_text(str(carol))
    screenshot(page, "panel-trust")
    asked = live.say(general, carol, f"{run.mention()} now can you hear me?")
    live.wait_until(lambda r: bool(r.replies_to(int(asked))))
    assert not run.replies_to(int(first))


def test_other_pages_render(page: Page, live: LiveBot) -> None:
    log_in(page, live)
    for link, heading, name in [
        ("Errors", "Failed invocations", "panel-errors"),
        ("Personas", "Personas", "panel-personas"),
        ("Send", "Send a message", "panel-send"),
    ]:
        page.get_by_role("link", name=link, exact=True).click()
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
        screenshot(page, name)


def test_pages_fit_a_phone_screen(page: Page, live: LiveBot) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live)
    general = live.running.world.general_id
    for path in ["/", "/chats", f"/chats/{general}", "/activity", "/trust", "/settings"]:
        shown = page.goto(path)
        assert shown is not None and shown.ok, path
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, (path, overflow)
    page.goto("/chats")
    screenshot(page, "panel-phone-chats")


def test_send_a_manual_message(page: Page, live: LiveBot) -> None:
    run = live.running
    log_in(page, live)
    page.get_by_role("link", name="Send", exact=True).click()
    page.get_by_label("Channel").select_option(str(run.world.general_id))
    page.get_by_label("Message").fill("hello from the panel")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("status")).to_contain_text("Sent as message")
    live.wait_until(
        lambda r: any(m.get("content") == "hello from the panel" for m in r.sim.bot_messages())
    )
    live.wait_event("manual", source="web")


def test_change_the_wakeword_and_a_limit_and_see_them_in_force(page: Page, live: LiveBot) -> None:
    run = live.running
    general, alice, bob = run.world.general_id, run.world.alice_id, run.world.bob_id
    live.call(run.bot.store.set_tier, bob, "user")
    log_in(page, live)
    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("heading", name="Settings")).to_be_visible()
    form = page.locator("#settings-form")
    limit = form.get_by_label("budget.user_requests_per_minute")
    expect(limit).to_have_value("6")
    expect(form.locator("#group-budget")).to_contain_text("a whole number, 0 to 600")
    form.get_by_label("wakeword", exact=True).fill("!p")
    limit.fill("1")
    form.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status")).to_have_text(
        "wakeword is now !p. budget.user_requests_per_minute is now 1."
    )
    expect(form.get_by_label("wakeword", exact=True)).to_have_value("!p")
    expect(form.locator("#group-wakeword .tag")).to_have_text("runtime")
    screenshot(page, "panel-settings")

    # The next message already knows the new wakeword...
    asked = live.say(general, alice, f"{run.mention()} !p help")
    live.wait_until(lambda r: bool(r.replies_to(int(asked))))
    [reply] = live.call(run.replies_to, int(asked))
    assert "(start with `!p `)" in reply["content"]
    # ...and the new limit: bob's second question in a minute gets the polite line.
    first = live.say(general, bob, f"{run.mention()} question one?")
    live.wait_until(lambda r: bool(r.replies_to(int(first))))
    second = live.say(general, bob, f"{run.mention()} question two?")
    live.wait_until(lambda r: bool(r.replies_to(int(second))))
    [polite] = live.call(run.replies_to, int(second))
    assert polite["content"].startswith("Sorry, that's more questions")
