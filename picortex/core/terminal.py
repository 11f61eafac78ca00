"""Remote text made safe to print: no control characters reach the terminal.

Message text, names and error bodies come from other people. Printed raw, an escape
sequence could recolour, retitle or rewrite the owner's terminal, and a carriage return or a
bidirectional override could hide or reorder what is shown. Each such character is written
as a visible `\\uXXXX` escape instead (which also keeps JSON text valid JSON).
"""

from __future__ import annotations

import re
from typing import Final

# C0 controls but tab and newline, DEL, C1 controls (a lone 0x9b starts a sequence in some
# terminals), and the invisible direction marks and overrides.
_UNSAFE: Final = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_LINE: Final = re.compile(f"[\n{_UNSAFE}]")
_UNSAFE_TEXT: Final = re.compile(f"[{_UNSAFE}]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def clean_line(text: str) -> str:
    """`text` safe to print as one line: newlines and control characters escaped."""
    return _UNSAFE_LINE.sub(_escape, text)


def clean_text(text: str) -> str:
    """`text` safe to print; newlines (and tabs) are kept, other control characters escaped."""
    return _UNSAFE_TEXT.sub(_escape, text)
