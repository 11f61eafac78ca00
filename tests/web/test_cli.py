"""`picortex web` and the `[web]` keys."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest

from picortex.cli.web import run_web
from picortex.config import load_settings
from picortex.errors import ConfigError
from picortex.web.auth import LINK_SECONDS, Sessions, load_or_create_token


def test_web_prints_address_and_a_one_time_link(tmp_path: Path) -> None:
    (tmp_path / "picortex.toml").write_text('[web]\nhost = "0.0.0.0"\nport = 9123\n')
    settings = load_settings({"PICORTEX_HOME": str(tmp_path)})
    out = io.StringIO()
    assert run_web(settings, out=out) == 1  # no bot is running
    text = out.getvalue()
    assert "panel:      http://127.0.0.1:9123" in text
    assert "picortex is not running" in text
    token = load_or_create_token(tmp_path)
    assert token not in text  # the link carries a signed code, never the token
    code = re.search(r"/login\?once=(\S+)", text)
    assert code is not None
    # The moment the link was made, read from the code itself: no reading of the clock.
    issued = int(code.group(1).split(".")[1]) - LINK_SECONDS
    assert not Sessions(token).use_code(code.group(1), issued + LINK_SECONDS)  # expired
    sessions = Sessions(token)
    assert sessions.use_code(code.group(1), issued)
    assert not sessions.use_code(code.group(1), issued + 1)  # used once already


def test_web_says_when_the_panel_is_off(tmp_path: Path) -> None:
    (tmp_path / "picortex.toml").write_text("[web]\nenabled = false\n")
    out = io.StringIO()
    assert run_web(load_settings({"PICORTEX_HOME": str(tmp_path)}), out=out) == 1
    assert "turned off" in out.getvalue()
    assert not (tmp_path / "web.token").exists()


def test_web_keys_default_and_validate(tmp_path: Path) -> None:
    settings = load_settings({"PICORTEX_HOME": str(tmp_path)})
    assert (settings.web.enabled, settings.web.host, settings.web.port) == (True, "127.0.0.1", 8765)
    for bad in ["port = 70000", 'port = "80"', "enabled = 1", 'host = ""']:
        (tmp_path / "picortex.toml").write_text(f"[web]\n{bad}\n")
        with pytest.raises(ConfigError, match=r"web\."):
            load_settings({"PICORTEX_HOME": str(tmp_path)})


def test_sim_chat_with_web_prints_the_panel_address_and_a_login_link() -> None:
    import httpx

    from picortex.cli.chat import run_chat

    out = io.StringIO()
    stdin = io.StringIO("/quit\n")
    assert run_chat(stdin=stdin, out=out, web=True) == 0
    text = out.getvalue()
    assert re.search(r"^panel: http://127\.0\.0\.1:\d+$", text, re.M)
    assert re.search(r"^log in: http://127\.0\.0\.1:\d+/login\?once=\S+$", text, re.M)
    # The bot has stopped: the panel went with it.
    url = re.search(r"^panel: (\S+)$", text, re.M)
    assert url is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(url.group(1) + "/login", timeout=5)


def test_sim_chat_without_web_serves_no_panel() -> None:
    from picortex.cli.chat import run_chat

    out = io.StringIO()
    level = logging.getLogger().level
    assert run_chat(stdin=io.StringIO("/quit\n"), out=out) == 0
    assert "panel:" not in out.getvalue()
    # Its quiet log level was for the transcript only: the caller's level is back.
    assert logging.getLogger().level == level


def test_status_names_the_panel() -> None:
    from picortex.cli.status import format_status

    lines = format_status({"web": {"url": "http://127.0.0.1:8765"}})
    assert "web panel:         http://127.0.0.1:8765" in lines
    lines = format_status({"web": {"url": None}})
    assert "web panel:         not served (see the log)" in lines
    assert not any(line.startswith("web panel") for line in format_status({"web": None}))
