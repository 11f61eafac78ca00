"""Fault points from PICORTEX_FAULT_INJECT: an actor raises on purpose when a message matches.

The variable is a comma-separated list of `ACTOR:SUBSTRING`; ACTOR is one of `FAULT_ACTORS`.
"""

from __future__ import annotations

from typing import Final

import attrs

from picortex.errors import ConfigError, FaultInjected

ENV_VAR: Final = "PICORTEX_FAULT_INJECT"
FAULT_ACTORS: Final = ("cache", "llm", "log", "mailbox")


@attrs.frozen
class FaultPoints:
    """Parsed fault rules: `(actor, substring)` pairs; empty means no faults (the normal case)."""

    rules: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, spec: str) -> FaultPoints:
        """Parse `ACTOR:SUBSTRING[,ACTOR:SUBSTRING...]`; blank text means no faults.

        Raises:
            ConfigError: an entry is not `ACTOR:SUBSTRING` with a known actor and a non-empty
                substring.
        """
        rules: list[tuple[str, str]] = []
        for raw in spec.split(","):
            entry = raw.strip()
            if not entry:
                continue
            actor, sep, substring = entry.partition(":")
            actor = actor.strip()
            if not sep or actor not in FAULT_ACTORS:
                raise ConfigError(
                    f"{ENV_VAR} entry {entry!r} must look like ACTOR:SUBSTRING with ACTOR one "
                    f"of {', '.join(FAULT_ACTORS)}."
                )
            if not substring:
                raise ConfigError(
                    f"{ENV_VAR} entry {entry!r} has an empty SUBSTRING, which would fault "
                    "every message."
                )
            rules.append((actor, substring))
        return cls(tuple(rules))

    def check(self, actor: str, content: str) -> None:
        """Raise FaultInjected when a rule for `actor` matches `content`."""
        for rule_actor, substring in self.rules:
            if rule_actor == actor and substring in content:
                raise FaultInjected(f"fault injected in {actor}: content contains {substring!r}")

    def __bool__(self) -> bool:
        return bool(self.rules)
