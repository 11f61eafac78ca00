"""The error tree of picortex.

PicortexError
+-- ConfigError            bad configuration or usage: one sentence, exit code 2
+-- FatalDiscordError      Discord refused us for good (fatal close code, 401): exit code 3
+-- SupervisorExhausted    a supervisor gave up after too many restarts: exit code 70 at root
+-- StoreError             the database could not be opened or migrated
+-- FaultInjected          a fault raised on purpose by PICORTEX_FAULT_INJECT
+-- DiscordHTTPError       Discord answered with an error we do not retry
    +-- InvalidRequestGuardError  we refuse to send: too many invalid requests lately
"""

from __future__ import annotations


class PicortexError(Exception):
    """Base of every error picortex raises on purpose."""


class ConfigError(PicortexError):
    """Bad configuration or usage; the message is one sentence for the user."""


class FatalDiscordError(PicortexError):
    """Discord refused the bot for good (a fatal close code or HTTP 401)."""

    def __init__(self, message: str, *, close_code: int | None = None) -> None:
        super().__init__(message)
        self.close_code = close_code


class SupervisorExhausted(PicortexError):
    """A supervisor saw more restarts than its intensity allows and stopped."""


class StoreError(PicortexError):
    """The SQLite store could not be opened, migrated or written."""


class FaultInjected(PicortexError):
    """Raised on purpose by a fault point named in PICORTEX_FAULT_INJECT."""


class DiscordHTTPError(PicortexError):
    """Discord answered with an error status that is not retried.

    Attributes:
        status: the HTTP status (0 when no answer arrived at all).
        code: Discord's JSON error code, when the body had one.
        message: Discord's message, or a short description of what went wrong.
    """

    def __init__(self, status: int, code: int | None, message: str) -> None:
        suffix = f" (code {code})" if code is not None else ""
        super().__init__(f"Discord HTTP {status}{suffix}: {message}")
        self.status = status
        self.code = code
        self.message = message


class InvalidRequestGuardError(DiscordHTTPError):
    """Refused locally: too many 401/403/429 answers in the last ten minutes."""

    def __init__(self, message: str) -> None:
        super().__init__(0, None, message)
        self.args = (message,)
