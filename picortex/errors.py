"""The error tree of picortex: every exception the package raises on purpose.

Each class says whether it is fatal (`fatal = True`: a supervisor never restarts the actor that
raised it; the process stops with the class's exit code) or retryable (a supervisor restarts
the actor, with backoff and within its intensity).

    PicortexError                    base: exit 2 when it stops a command          retryable
    +-- ConfigError                  bad configuration or usage: exit 2            fatal
    +-- FatalDiscordError            Discord refused us for good (close code, 401)  fatal, exit 3
    +-- SupervisorExhausted          a supervisor gave up: exit 70 at the root     retryable
    +-- DiscordHTTPError             Discord answered an error REST does not retry retryable
    |   +-- InvalidRequestGuardError refused locally before Discord's ban          retryable
    +-- GatewayError                 the gateway had nothing usable to connect to  retryable
    +-- LeaseEnded                   a post for a shard no longer held: refused    retryable
    +-- ModelError                   the model endpoint's answer was unusable      retryable
    |   +-- StreamCut                a streamed answer stopped before its end
    +-- AttachmentRefused            an attachment body not fetched (host, size)   retryable
    +-- PromptTooLarge               no discriminator prompt fits the budget       retryable
    +-- ContextUnavailable           the context cache could not answer            retryable
    +-- CorruptCacheFile             a context cache file is damaged (a ValueError) retryable
    +-- StoreError                   the database could not be opened or written   retryable
    |   +-- DatabaseUnreachable      the shared database is down; writes are kept  retryable
    +-- ChatHomeError                a chat home directory or git step failed      retryable
    +-- HomeLocked                   another `picortex run` holds this home        fatal, exit 2
    +-- PanelInputError              the web panel refused input (400, a sentence) retryable
    +-- BodyTooLarge                 a panel request body went past its cap (413)  retryable
    +-- FaultInjected                raised on purpose by PICORTEX_FAULT_INJECT    retryable
    +-- SimError                     the simulator was asked for what it lacks     retryable
    +-- ApiError                     the simulated Discord answers an error status retryable
    +-- CutConnection                a simulated stream drops its connection       retryable

Private signals that never leave their module (`normalize._Junk`, `config._Invalid`,
`sim.control._BadRequest`) derive from PicortexError too. A wrong argument from a caller in
this package is a programming error and raises the builtin ValueError, TypeError or
RuntimeError, as any Python library does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class PicortexError(Exception):
    """Base of every error picortex raises on purpose."""

    #: True: retrying cannot help (a supervisor stops instead of restarting the actor).
    fatal: ClassVar[bool] = False
    #: The process exit code when this error stops a command (one sentence is printed).
    exit_code: ClassVar[int] = 2


class ConfigError(PicortexError):
    """Bad configuration or usage; the message is one sentence for the user."""

    fatal = True
    exit_code = 2


class FatalDiscordError(PicortexError):
    """Discord refused the bot for good (a fatal close code or HTTP 401)."""

    fatal = True
    exit_code = 3

    def __init__(self, message: str, *, close_code: int | None = None) -> None:
        super().__init__(message)
        self.close_code = close_code


class SupervisorExhausted(PicortexError):
    """A supervisor saw more restarts than its intensity allows and stopped.

    Retryable: to the parent supervisor it is one crash of a child, as in OTP.
    """

    exit_code = 70


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


class GatewayError(PicortexError):
    """The gateway could not connect: no usable websocket URL, or the upgrade was refused."""


class LeaseEnded(PicortexError):
    """A request of a shard this process no longer holds (SPEC 17): refused before it was
    sent; the shard's next holder answers it."""


class ModelError(PicortexError):
    """The model endpoint answered, but not with something usable."""


class StreamCut(ModelError):
    """A streamed answer stopped before `message_stop`: `text` is what had arrived.

    The tokens are those the stream reported before it stopped (Anthropic bills them).
    """

    def __init__(self, reason: str, text: str, input_tokens: int, output_tokens: int) -> None:
        super().__init__(f"the answer stream was cut after {len(text)} characters: {reason}")
        self.text = text
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens


class AttachmentRefused(PicortexError):
    """An attachment body was not fetched: a host that is not Discord's, too large, or a
    failed download. The message is one short phrase for the prompt's file list."""


class PromptTooLarge(PicortexError):
    """No discriminator prompt fits the budget: the template and metadata alone are too big."""


class ContextUnavailable(PicortexError):
    """The context cache stopped or crashed while handling a request."""


class CorruptCacheFile(PicortexError, ValueError):
    """A context cache file is not such a file for its channel (damaged or foreign)."""


class StoreError(PicortexError):
    """The SQLite store could not be opened, migrated or written."""


class DatabaseUnreachable(StoreError):
    """The shared database (PostgreSQL) cannot be reached: its connection was lost.

    Queued writes are kept and committed once it is back; `in_doubt` is the id of a
    transaction whose COMMIT was sent but never answered (it may have committed).
    """

    def __init__(self, message: str, *, in_doubt: int | None = None) -> None:
        super().__init__(message)
        self.in_doubt = in_doubt


class ChatHomeError(PicortexError):
    """A chat home directory, its files or one of its git steps failed."""


class HomeLocked(PicortexError):
    """Another `picortex run` already holds this home's lock."""

    fatal = True
    exit_code = 2

    def __init__(self, message: str, *, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class FaultInjected(PicortexError):
    """Raised on purpose by a fault point named in PICORTEX_FAULT_INJECT."""


class SimError(PicortexError):
    """A simulator call named something the world does not have, or broke a world rule."""


class ApiError(PicortexError):
    """A simulated Discord REST error: status, JSON error code, message, field errors."""

    def __init__(
        self, status: int, code: int, message: str, errors: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors

    def body(self) -> dict[str, Any]:
        """The JSON body Discord sends with this error."""
        out: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            out["errors"] = dict(self.errors)
        return out


def is_fatal(error: BaseException) -> bool:
    """True when retrying cannot help: the error's class says it is fatal."""
    return isinstance(error, PicortexError) and error.fatal


class CutConnection(PicortexError):
    """Raised by a simulated streamed body to drop the connection without finishing it."""


class PanelInputError(PicortexError):
    """Input the web panel refuses; the message is one sentence for the user (HTTP 400)."""
