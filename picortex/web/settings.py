"""The settings page (SPEC 13): every key `config set` accepts, grouped, with its bounds, its
value and where that value comes from. Built from the config key table, so a key added there
shows here without a change. Nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from picortex.config import (
    PRICES_PREFIX,
    Bounds,
    format_value,
    key_bounds,
    parse_runtime_value,
)
from picortex.core.commands import owner_only_config
from picortex.core.money import usd
from picortex.errors import ConfigError

logger = logging.getLogger(__name__)

# Group titles in page order; a section not named here follows them, titled by its name.
GROUP_TITLES: Final[Mapping[str, str]] = {
    "wakeword": "Wakeword",
    "conversation": "Conversation",
    "budget": "Limits",
    "models": "Models",
    "prices": "Prices (USD per million tokens)",
    "response_policy": "Response policy",
    "replies": "Replies",
    "poll": "Polls",
    "attention": "Attention defaults",
    "access": "Access by role and channel (ids)",
    "discriminator": "Discriminator",
    "agent": "Agent",
}
# Keys outside any [section] belong to the conversation, except these.
TOP_LEVEL_GROUPS: Final[Mapping[str, str]] = {
    "wakeword": "wakeword",
    "poll_enabled": "poll",
    "poll_seconds": "poll",
}
TOP_LEVEL_GROUP: Final = "conversation"
# Where a value comes from: a `config set` kept in the database, picortex.toml, or neither.
RUNTIME, FILE, DEFAULT = "runtime", "file", "default"
USD_SUFFIX: Final = "_usd"


def group_of(key: str) -> str:
    """The group a key is shown in: its [section], or for a top-level key its topic."""
    section, dot, _ = key.partition(".")
    if dot:
        return section
    return TOP_LEVEL_GROUPS.get(key, TOP_LEVEL_GROUP)


def group_title(group: str) -> str:
    """A group's heading."""
    return GROUP_TITLES.get(group) or group.replace("_", " ").capitalize()


@attrs.frozen
class Setting:
    """One key as the page shows it."""

    key: str
    value: str
    source: str  # RUNTIME, FILE or DEFAULT
    bounds: Bounds
    owner_only: bool

    @property
    def money(self) -> bool:
        """True for amounts of dollars (ceilings and prices)."""
        return self.key.endswith(USD_SUFFIX) or self.key.startswith(PRICES_PREFIX)

    @property
    def allowed(self) -> str:
        """What the key accepts, in words; amounts in dollars."""
        bounds = self.bounds
        if self.money and bounds.maximum is not None:
            return f"{usd(bounds.minimum)} to {usd(bounds.maximum)}"
        return bounds.describe()

    def as_json(self) -> dict[str, object]:
        """The API's setting object."""
        bounds = self.bounds
        return {
            "key": self.key,
            "group": group_of(self.key),
            "value": self.value,
            "source": self.source,
            "owner_only": self.owner_only,
            "bounds": {
                "kind": bounds.kind,
                "min": bounds.minimum,
                "max": bounds.maximum,
                "choices": list(bounds.choices),
                "text": self.allowed,
            },
        }


@attrs.frozen
class Group:
    """The keys of one section, in the key table's order."""

    name: str
    title: str
    settings: tuple[Setting, ...]


def file_keys(path: Path) -> frozenset[str]:
    """The dotted keys `picortex.toml` sets (prices as `prices.<model>.<field>`).

    The bot started with this file, so a file that cannot be read now sets nothing here
    rather than failing the page.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return frozenset()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        logger.warning("%s: cannot tell which settings it holds (%s)", path, exc)
        return frozenset()
    keys: set[str] = set()
    for name, value in data.items():
        if not isinstance(value, dict):
            keys.add(name)
        elif name == PRICES_PREFIX.rstrip("."):
            for model, fields in value.items():
                if isinstance(fields, dict):
                    keys.update(f"{PRICES_PREFIX}{model}.{field}" for field in fields)
        else:
            keys.update(f"{name}.{sub}" for sub in value)
    return frozenset(keys)


def source_of(key: str, stored: Mapping[str, str], in_file: frozenset[str]) -> str:
    """Where a key's value comes from: a runtime change wins over the file."""
    if key in stored:
        return RUNTIME
    return FILE if key in in_file else DEFAULT


def settings_view(
    values: Mapping[str, str], stored: Mapping[str, str], in_file: frozenset[str]
) -> list[Group]:
    """Every key in `values` (key -> value as text, as `config get` lists them), grouped."""
    groups: dict[str, list[Setting]] = {}
    for key, value in values.items():
        try:
            bounds = key_bounds(key)
        except ConfigError:
            bounds = Bounds("text")  # a key the table lacks still shows, as text
        setting = Setting(
            key, value, source_of(key, stored, in_file), bounds, owner_only_config(key)
        )
        groups.setdefault(group_of(key), []).append(setting)
    order = list(GROUP_TITLES)
    ranked = sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))
    return [Group(name, group_title(name), tuple(groups[name])) for name in ranked]


def changed_values(submitted: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The submitted keys whose value differs from the current one, in `current`'s order.

    Fields that are no key (the CSRF token) are left out, and so is a value that reads back
    as the current one (`10.0` for `10`): a save changes, and logs, only what was edited.
    A value that does not parse counts as changed, so the executor refuses it in words.
    """
    changes: dict[str, str] = {}
    for key, now in current.items():
        text = submitted.get(key)
        if text is None or text == now:
            continue
        try:
            if format_value(parse_runtime_value(key, text)) == now:
                continue
        except ConfigError:
            pass
        changes[key] = text
    return changes


__all__ = [
    "DEFAULT",
    "FILE",
    "RUNTIME",
    "Group",
    "Setting",
    "changed_values",
    "file_keys",
    "group_of",
    "settings_view",
]
