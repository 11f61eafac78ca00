"""The context cache's channel files: codec, atomic replacement, the directory index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.history import ChannelHistory
from picortex.errors import CorruptCacheFile
from picortex.store.cache_files import (
    FILE_VERSION,
    channel_path,
    decode_channel,
    encode_channel,
    index_directory,
    read_channel,
    remove_channel,
    write_atomic,
)
from picortex.types import Attachment, Message, MessageReference, User

CH = 1000
ALICE = User(id=11, username="alice", global_name="Alice", nick="Ali")
BOT = User(id=99, username="picortex", bot=True)


def msg(i: int, content: str = "", *, author: User = ALICE, **kw: object) -> Message:
    return Message(
        id=i,
        channel_id=CH,
        author=author,
        content=content or f"text {i}",
        timestamp="2024-05-01T12:34:56.789000+00:00",
        guild_id=500,
        **kw,  # type: ignore[arg-type]
    )


def test_a_channel_round_trips_through_its_file() -> None:
    channel = ChannelHistory(
        CH,
        guild_id=500,
        synced_to=7,
        messages=[
            msg(1, "hello"),
            msg(2, "see file", attachments=(Attachment(id=5, filename="a.png", size=10),)),
            msg(3, "re", author=BOT, message_reference=MessageReference(1, CH, 500)),
            msg(4, "fixed", edited_timestamp="2024-05-01T12:40:00+00:00"),
            msg(5, "pinned", type=6),
        ],
    )
    data = encode_channel(channel)
    assert decode_channel(data, CH) == channel
    doc = orjson.loads(data)
    assert doc["v"] == FILE_VERSION
    assert len(doc["users"]) == 2  # each author once, however many messages


@given(st.lists(st.tuples(st.integers(1, 10**18), st.text(max_size=30)), max_size=20))
def test_any_history_round_trips(records: list[tuple[int, str]]) -> None:
    by_id = dict(records)
    channel = ChannelHistory(
        CH, guild_id=500, messages=[msg(i, text) for i, text in sorted(by_id.items())]
    )
    assert decode_channel(encode_channel(channel), CH).messages == channel.messages


def test_a_file_from_before_nicknames_reads_without_one() -> None:
    doc = {
        "v": FILE_VERSION,
        "channel_id": CH,
        "guild_id": None,
        "synced_to": None,
        "users": [[11, "alice", None, False]],
        "messages": [{"id": 1, "author": 0, "ts": "t", "text": "hi"}],
    }
    channel = decode_channel(orjson.dumps(doc), CH)
    assert channel.messages[0].author == User(id=11, username="alice")
    assert channel.messages[0].content == "hi"


@pytest.mark.parametrize(
    ("junk", "reason"),
    [
        (b"\x00\xffnot json", "JSONDecodeError"),
        (b'{"v": 1, "channel_id": 1000, "users": [], "messages": [{"id": "x"}]}', "integer"),
        (b'{"v": 1, "channel_id": 7, "users": [], "messages": []}', "another channel"),
        (b'{"v": 99}', "of this version"),
        (b"[]", "of this version"),
        (
            b'{"v": 1, "channel_id": 1000, "users": [[1, "a", null, false]], "messages": '
            b'[{"id": 2, "author": 0, "ts": "t"}, {"id": 2, "author": 0, "ts": "t"}]}',
            "out of order",
        ),
        (
            b'{"v": 1, "channel_id": 1000, "users": [], "messages": [{"id": 1, "author": 0}]}',
            "IndexError",
        ),
    ],
)
def test_a_damaged_file_is_corrupt(junk: bytes, reason: str) -> None:
    with pytest.raises(CorruptCacheFile, match=reason):
        decode_channel(junk, CH)


def test_read_and_remove(tmp_path: Path) -> None:
    assert read_channel(tmp_path, CH) is None
    channel = ChannelHistory(CH, guild_id=500, messages=[msg(1)])
    write_atomic(channel_path(tmp_path, CH), encode_channel(channel))
    assert read_channel(tmp_path, CH) == channel
    remove_channel(tmp_path, CH)
    remove_channel(tmp_path, CH)  # already gone: fine
    assert read_channel(tmp_path, CH) is None


def test_an_unreadable_file_is_an_os_error(tmp_path: Path) -> None:
    channel_path(tmp_path, CH).mkdir()
    with pytest.raises(OSError):
        read_channel(tmp_path, CH)


def test_the_index_is_in_write_order_and_skips_strangers(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    assert index_directory(folder) == []  # created when missing
    assert (folder.stat().st_mode & 0o777) == 0o700
    for age, (channel, size) in enumerate([(3, 30), (1, 10), (2, 20)]):
        path = channel_path(folder, channel)
        path.write_bytes(b"x" * size)
        os.utime(path, ns=(0, (100 + age) * 10**9))
    (folder / "notes.txt").write_text("not ours")
    (folder / "abc.json").write_text("not a channel")
    (folder / "4.json.tmp").write_text("left by a crash")
    assert index_directory(folder) == [(3, 30), (1, 10), (2, 20)]
    assert not (folder / "4.json.tmp").exists()
    assert (folder / "notes.txt").exists()


def test_write_atomic_replaces_and_cleans_up_on_a_failed_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "1.json"
    write_atomic(path, b"old")
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert (path.stat().st_mode & 0o777) == 0o600

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_atomic(path, b"newer")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["1.json"]


def test_a_crash_between_write_and_rename_leaves_the_old_file(tmp_path: Path) -> None:
    channel = ChannelHistory(CH, guild_id=500, messages=[msg(1, "kept safe")])
    path = channel_path(tmp_path, CH)
    write_atomic(path, encode_channel(channel))
    before = path.read_bytes()
    # A child process writes new contents and is killed right before the rename.
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from picortex.store.cache_files import write_atomic\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "write_atomic(Path(sys.argv[1]), b'{\"half\": ')\n"
    )
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=repo, check=False)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert (tmp_path / f"{CH}.json.tmp").exists()
    # At the next start the leftover is removed and the old contents are read as before.
    assert index_directory(tmp_path) == [(CH, len(before))]
    assert sorted(os.listdir(tmp_path)) == [f"{CH}.json"]
    assert read_channel(tmp_path, CH) == channel
