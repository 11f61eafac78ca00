"""A merged request as the model gets it: held to `context_chars` like any other (SPEC 9).

Follow-ups that join a request while its answer is generated (SPEC 5 step 4) restart it with
the merged request; a storm of them must not grow one prompt without bound. The model gets
the trigger (one Discord message, whole, as any request) and the newest follow-ups whose
text fits in `context_chars` characters together; the newest one always goes, cut to fit.
The older ones still joined the request (they are answered, logged and marked handled with
it): only the prompt leaves them out, with their attachments.
"""

from __future__ import annotations

import attrs

from picortex.core.context import ELLIPSIS
from picortex.core.continuation import Request


def held_request(request: Request, max_chars: int) -> Request:
    """`request` with only the follow-ups the prompt takes (see the module's docstring).

    The result keeps the request's identity (trigger, generation); its `message_ids` and
    `texts` stay aligned, so each kept follow-up brings its own attachments.
    """
    if len(request.texts) <= 1 or sum(map(len, request.texts[1:])) <= max_chars:
        return request
    room = max(0, max_chars)
    kept: list[tuple[int, str]] = []
    for index in range(len(request.texts) - 1, 0, -1):
        text = request.texts[index]
        if not kept and len(text) > room:
            text = text[: max(0, room - len(ELLIPSIS))] + ELLIPSIS
        elif len(text) > room:
            break
        kept.append((index, text))
        room -= len(text)
    kept.reverse()
    return attrs.evolve(
        request,
        message_ids=(request.message_ids[0], *(request.message_ids[i] for i, _ in kept)),
        texts=(request.texts[0], *(text for _, text in kept)),
    )
