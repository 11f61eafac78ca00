"""Reading the panel's settings form as a browser would send it."""

from __future__ import annotations

import html
import re

_INPUT = re.compile(r'<input id="set-[^"]+" name="([^"]+)"[^>]* value="([^"]*)"')
_SELECT = re.compile(r'<select id="set-[^"]+" name="([^"]+)">(.*?)</select>', re.S)
_SELECTED = re.compile(r"<option selected>([^<]*)</option>")
_TEXTAREA = re.compile(r'<textarea id="set-[^"]+" name="([^"]+)"[^>]*>(.*?)</textarea>', re.S)
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def settings_form(page: str) -> dict[str, str]:
    """The settings form's fields, filled in as the page shows them, with the CSRF token."""
    fields = dict(_INPUT.findall(page))
    fields.update(_TEXTAREA.findall(page))
    for name, options in _SELECT.findall(page):
        [fields[name]] = _SELECTED.findall(options)
    csrf = _CSRF.search(page)
    assert csrf is not None
    return {**{k: html.unescape(v) for k, v in fields.items()}, "csrf": csrf.group(1)}
