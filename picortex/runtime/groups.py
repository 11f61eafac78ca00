"""Trio's exception groups, unwrapped where one error is all there is to report."""

from __future__ import annotations

import trio


def lone_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The one real error in a nursery's group (the rest being cancellations), else None.

    A task that crashes takes its siblings down with `Cancelled`; the supervisor should log
    the crash itself, not a group around it.
    """
    errors: list[Exception] = []
    for exc in _leaves(group):
        if isinstance(exc, trio.Cancelled):
            continue
        if not isinstance(exc, Exception):
            return None
        errors.append(exc)
    return errors[0] if len(errors) == 1 else None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]
