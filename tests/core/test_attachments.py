"""Which attachments reach the model (SPEC 16): kinds, caps, hosts, sniffing."""

from __future__ import annotations

import pytest

from picortex.core import attachments as core
from picortex.types import Attachment, Message, User

ALICE = User(1, "alice")
MALLORY = User(2, "mallory")
MB = 1024 * 1024


def attachment(
    n: int, filename: str, size: int = 1000, content_type: str | None = None
) -> Attachment:
    return Attachment(
        n, filename, size, f"https://cdn.discordapp.com/a/{n}/{filename}", content_type
    )


def message(n: int, *files: Attachment, author: User = ALICE) -> Message:
    return Message(n, 10, author, "hi", "2026-01-01T00:00:00+00:00", attachments=files)


@pytest.mark.parametrize(
    ("filename", "content_type", "kind", "media_type"),
    [
        ("shot.png", "image/png", "image", "image/png"),
        ("shot.PNG", None, "image", "image/png"),
        ("photo.jpg", None, "image", "image/jpeg"),
        ("anim.gif", "image/gif", "image", "image/gif"),
        ("pic.webp", None, "image", "image/webp"),
        # The content type Discord sends wins over the name.
        ("looks.png", "application/pdf", "other", None),
        ("noext", "image/jpeg", "image", "image/jpeg"),
        ("drawing.svg", "image/svg+xml", "other", None),
        ("notes.txt", "text/plain; charset=utf-8", "text", None),
        ("data.json", "application/json", "text", None),
        ("main.rs", None, "text", None),
        ("script.py", "application/octet-stream", "text", None),
        ("report.pdf", None, "other", None),
        ("archive.zip", "application/zip", "other", None),
    ],
)
def test_kind_by_content_type_else_extension(
    filename: str, content_type: str | None, kind: str, media_type: str | None
) -> None:
    assert core.kind_of(attachment(1, filename, content_type=content_type)) == (kind, media_type)


def test_at_most_five_images_per_message_and_five_mb_each() -> None:
    files = [attachment(n, f"{n}.png") for n in range(1, 7)]
    big = attachment(7, "huge.png", size=6 * MB)
    planned = core.plan([message(100, *files, big)], [])
    sent = [p.attachment.filename for p in planned if p.skip is None]
    assert sent == ["1.png", "2.png", "3.png", "4.png", "5.png"]
    skipped = {p.attachment.filename: p.skip for p in planned if p.skip is not None}
    assert skipped == {"6.png": "at most 5 images are sent", "huge.png": "larger than 5.0 MB"}


def test_text_files_over_100_kb_and_other_files_are_named_only() -> None:
    small = attachment(1, "notes.md", size=100 * 1024)
    large = attachment(2, "dump.csv", size=100 * 1024 + 1)
    pdf = attachment(3, "paper.pdf", size=2 * MB)
    planned = core.plan([message(100, small, large, pdf)], [])
    assert [(p.attachment.filename, p.kind, p.skip) for p in planned] == [
        ("notes.md", "text", None),
        ("dump.csv", "text", "larger than 100 KB"),
        ("paper.pdf", "other", "not a kind of file the model reads"),
    ]
    assert core.describe(pdf, "not read") == "- paper.pdf (pdf, 2.0 MB): not read"


def test_a_merged_request_reads_no_more_files_than_one_message_could_bring() -> None:
    # A trigger and follow-ups of ten text files each (Discord's most per message).
    merged = [
        message(100 + m, *(attachment(10 * m + n, f"{m}-{n}.txt") for n in range(10)))
        for m in range(3)
    ]
    planned = core.plan(merged, [])
    read = [p.attachment.filename for p in planned if p.skip is None]
    assert read == [f"0-{n}.txt" for n in range(10)]
    skips = {p.skip for p in planned if p.skip is not None}
    assert skips == {"at most 10 files are read per request"}
    # Images count toward the same ten, and a skipped one leaves the image cap alone.
    mixed = [message(200, *(attachment(n, f"{n}.txt") for n in range(8))), message(201)]
    mixed[1] = message(201, *(attachment(20 + n, f"{n}.png") for n in range(4)))
    read = [p.attachment.filename for p in core.plan(mixed, []) if p.skip is None]
    assert read == [*(f"{n}.txt" for n in range(8)), "0.png", "1.png"]


def test_recent_images_count_toward_five_newest_first_and_from_trusted_authors_only() -> None:
    request = [message(100, attachment(1, "now.png"), attachment(2, "now2.png"))]
    context = [
        message(90, attachment(3, "old1.png"), attachment(4, "old2.png")),
        message(95, attachment(5, "mid.png"), attachment(6, "notes.txt")),
        message(97, attachment(7, "theirs.png"), author=MALLORY),
        message(98, attachment(8, "new1.png"), attachment(9, "new2.png")),
    ]
    planned = core.plan(request, context, trusted=[ALICE.id])
    assert [(p.attachment.filename, p.own) for p in planned] == [
        ("now.png", True),
        ("now2.png", True),
        ("new1.png", False),
        ("new2.png", False),
        ("mid.png", False),
    ]
    assert all(p.skip is None for p in planned)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://cdn.discordapp.com/attachments/1/2/a.png?ex=1&is=2&hm=3", True),
        ("https://media.discordapp.net/attachments/1/2/a.png", True),
        ("http://cdn.discordapp.com/attachments/1/2/a.png", False),
        ("https://cdn.discordapp.com:8443/a.png", False),
        ("https://evil.example/a.png", False),
        ("https://cdn.discordapp.com.evil.example/a.png", False),
        ("http://127.0.0.1:5000/attachments/1/2/a.png", True),  # the API base's origin
        ("http://127.0.0.1:5001/attachments/1/2/a.png", True),  # another port of that host
        ("https://127.0.0.1:5000/a.png", True),
        ("http://127.0.0.2:5000/a.png", False),
        ("ftp://127.0.0.1:5000/a.png", False),
        ("file:///etc/passwd", False),
        ("not a url", False),
    ],
)
def test_only_discords_hosts_or_the_api_base_host(url: str, allowed: bool) -> None:
    assert core.url_allowed(url, "http://127.0.0.1:5000/api/v10") is allowed


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://discord.example/attachments/1/2/a.png", True),
        ("https://discord.example:8443/attachments/1/2/a.png", True),
        # Over an https API, a file link in plain http is refused: anyone on the path could
        # read or change what the model is shown.
        ("http://discord.example/attachments/1/2/a.png", False),
        ("http://discord.example:8080/a.png", False),
        ("http://cdn.discordapp.com/attachments/1/2/a.png", False),
        ("https://cdn.discordapp.com/attachments/1/2/a.png", True),
    ],
)
def test_over_an_https_api_plain_http_is_refused(url: str, allowed: bool) -> None:
    assert core.url_allowed(url, "https://discord.example/api/v10") is allowed
    assert core.url_allowed(url, "HTTPS://discord.example/api/v10") is allowed


def test_images_are_sniffed_and_text_is_decoded() -> None:
    assert core.sniff_image(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert core.sniff_image(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert core.sniff_image(b"GIF89a...") == "image/gif"
    assert core.sniff_image(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert core.sniff_image(b"<svg/>") is None
    assert core.decode_text("héllo\n".encode()) == "héllo\n"
    assert core.decode_text(b"\x00\x01binary") is None
    block = core.inline_text("a.md", "```py\nx = 1\n```\n")
    assert block.startswith("File a.md:\n````\n")
    assert block.endswith("\n````")
