"""Chat homes: `chats/<chat_id>/`, a git repository holding the chat's discriminator prompt
and, when the chat has one, its own agent prompt (the default agent's system prompt).

Every change to the prompt is a commit, so the repository's log is the prompt's history
(SPEC 7). Git runs synchronously with a timeout; callers in trio run this in a thread.

Reading the prompt is on every classification's path, so a prompt whose file has not
changed since it was last read (and committed) comes from memory without running git.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Final, NamedTuple

from picortex.errors import ChatHomeError as ChatHomeError

logger = logging.getLogger(__name__)

PROMPT_RELPATH: Final = ".picortex/prompts/discriminator.md"
AGENT_PROMPT_RELPATH: Final = ".picortex/prompts/agent.md"
GIT_TIMEOUT_SECONDS: Final = 15.0  # a local commit takes milliseconds; a hung git must not
GIT_USER_NAME: Final = "picortex"
GIT_USER_EMAIL: Final = "picortex@localhost"
SEED_MESSAGE: Final = "Seed discriminator prompt from the default template"
HAND_EDIT_MESSAGE: Final = "Hand edit picked up"
AGENT_PROMPT_SET: Final = "Agent prompt set"
AGENT_PROMPT_RESET: Final = "Agent prompt reset: the owner's prompt applies"
RESTORE_MESSAGE: Final = "Prompt file was missing: restored the default template"
# Chat ids become directory names: Discord ids are digits; keep to a safe alphabet.
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FIELD_SEP: Final = "\x1f"
_RECORD_SEP: Final = "\x1e"
# Prompts kept in memory (a few KiB each), least recently read dropped first.
PROMPT_CACHE_SIZE: Final = 1024
# A file changed within this many seconds of being read may change again without its
# stamp changing (timestamps are coarser than writes): it is not trusted from memory yet.
RACY_SECONDS: Final = 2.0

_Stamp = tuple[int, int, int, int, int]  # device, inode, size, mtime and ctime in ns


def _stamp(path: Path) -> _Stamp | None:
    """What changes whenever the file does (it is replaced or written); None if missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _PromptCache:
    """Committed prompts by file, each with the stamp its file had when read."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[Path, tuple[_Stamp, str]] = OrderedDict()
        self._lock = threading.Lock()  # homes are read from worker threads

    def get(self, path: Path, stamp: _Stamp) -> str | None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry[0] != stamp:
                return None
            self._entries.move_to_end(path)
            return entry[1]

    def put(self, path: Path, stamp: _Stamp, text: str) -> None:
        with self._lock:
            self._entries[path] = (stamp, text)
            self._entries.move_to_end(path)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def forget(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)


_PROMPTS: Final = _PromptCache(PROMPT_CACHE_SIZE)


class PromptVersion(NamedTuple):
    """One commit of the discriminator prompt."""

    commit: str
    date: str  # ISO 8601 with offset, as git records it
    message: str


def default_prompt_template() -> str:
    """The discriminator template shipped in the package."""
    ref = resources.files("picortex").joinpath("templates/discriminator.md")
    return ref.read_text(encoding="utf-8")


class ChatHome:
    """The chat home of one chat under `home_root/chats/<chat_id>`."""

    def __init__(self, home_root: Path, chat_id: str) -> None:
        if _CHAT_ID.fullmatch(chat_id) is None:
            raise ChatHomeError(f"chat id {chat_id!r} is not a Discord id")
        self.chat_id = chat_id
        self.root = home_root / "chats" / chat_id

    @property
    def prompt_path(self) -> Path:
        """Where the chat's discriminator prompt lives."""
        return self.root / PROMPT_RELPATH

    # -- git ------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # Inherited GIT_* variables (GIT_DIR, GIT_INDEX_FILE, ...) would point git elsewhere,
        # and the user's global config may require signing or hooks we cannot satisfy.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            {
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CEILING_DIRECTORIES": str(self.root.parent),
                "GIT_TERMINAL_PROMPT": "0",
                "LC_ALL": "C",
            }
        )
        return env

    def _git(self, *args: str) -> str:
        # The identity and signing are given per call, so a home needs no `git config`.
        command = [
            "git",
            "-c",
            "commit.gpgsign=false",
            "-c",
            f"user.name={GIT_USER_NAME}",
            "-c",
            f"user.email={GIT_USER_EMAIL}",
            *args,
        ]
        try:
            done = subprocess.run(  # noqa: S603 - fixed program, arguments are ours
                command,
                cwd=self.root,
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            raise ChatHomeError("git is not installed or not on PATH; chat homes need it") from None
        except subprocess.TimeoutExpired:
            raise ChatHomeError(
                f"git {args[0]} in {self.root} took longer than {GIT_TIMEOUT_SECONDS:g} s"
            ) from None
        except OSError as exc:
            raise ChatHomeError(f"git {args[0]} in {self.root} could not run: {exc}") from None
        if done.returncode != 0:
            detail = (done.stderr.strip() or done.stdout.strip()).splitlines()
            last = detail[-1] if detail else f"exit code {done.returncode}"
            raise ChatHomeError(f"git {args[0]} failed in {self.root}: {last}")
        return done.stdout

    def _prompt_changed(self, relpath: str) -> bool:
        return bool(self._git("status", "--porcelain", "--", relpath).strip())

    def _commit_prompt(self, message: str, relpath: str = PROMPT_RELPATH) -> bool:
        """Commit a prompt file (or its removal) if it differs from the last commit; True if
        it did."""
        if not self._prompt_changed(relpath):
            return False
        self._git("add", "-A", "--", relpath)
        self._git("commit", "-q", "-m", message, "--", relpath)
        return True

    def _has_commits(self) -> bool:
        return bool(self._git("rev-list", "-n", "1", "--all").strip())

    # -- files ----------------------------------------------------------------------------

    def _write(self, text: str, path: Path | None = None) -> None:
        path = self.prompt_path if path is None else path
        # Write beside and rename, so a crash never leaves half a prompt.
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            raise ChatHomeError(f"cannot write {path}: {exc.strerror or exc}") from None

    def _read(self, path: Path | None = None) -> str:
        path = self.prompt_path if path is None else path
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ChatHomeError(f"{path} is not UTF-8 text") from None
        except OSError as exc:
            raise ChatHomeError(f"cannot read {path}: {exc.strerror or exc}") from None

    # -- public ---------------------------------------------------------------------------

    def exists(self) -> bool:
        """True when the chat home's repository has been created."""
        return (self.root / ".git").exists()

    def ensure(self) -> None:
        """Create the chat home on first use: a git repository with the seeded prompt.

        Safe to call again: it finishes a half-made home and restores a deleted prompt.

        Raises:
            ChatHomeError: a directory or git step failed.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ChatHomeError(f"cannot create {self.root}: {exc.strerror or exc}") from None
        if not self.exists():
            # An empty template: no sample hooks, description or excludes in every chat.
            self._git("init", "-q", "-b", "main", "--template=")
        else:
            self._drop_sample_hooks()
        if not self.prompt_path.exists():
            seeded_before = self._has_commits()
            self._write(default_prompt_template())
            self._commit_prompt(RESTORE_MESSAGE if seeded_before else SEED_MESSAGE)
        elif not self._has_commits():
            self._commit_prompt(SEED_MESSAGE)

    def _drop_sample_hooks(self) -> None:
        # Homes made by earlier versions carry git's sample hooks: inert, but a dozen files
        # in every chat.
        for sample in (self.root / ".git" / "hooks").glob("*.sample"):
            with contextlib.suppress(OSError):  # harmless where it stays
                sample.unlink()

    def _pick_up_hand_edit(self, relpath: str = PROMPT_RELPATH) -> None:
        self._commit_prompt(HAND_EDIT_MESSAGE, relpath)

    def _read_committed(self, path: Path, relpath: str) -> str:
        """A prompt file's text, a hand edit committed first; from memory when unchanged."""
        stamp = _stamp(path)
        if stamp is not None:
            cached = _PROMPTS.get(path, stamp)
            if cached is not None and self.exists():
                return cached
        self.ensure()
        self._pick_up_hand_edit(relpath)
        before = _stamp(path)
        text = self._read(path)
        after = _stamp(path)
        # Remembered only when nothing wrote the file meanwhile, and not just now.
        if after is not None and after == before and time.time_ns() - after[3] > RACY_SECONDS * 1e9:
            _PROMPTS.put(path, after, text)
        return text

    def read_prompt(self) -> str:
        """The chat's prompt; a hand edit since the last commit is committed first.

        Unchanged since the last read, it costs a stat and no subprocess.

        Raises:
            ChatHomeError: git failed or the file cannot be read.
        """
        return self._read_committed(self.prompt_path, PROMPT_RELPATH)

    @property
    def agent_prompt_path(self) -> Path:
        """Where the chat's own agent prompt lives (absent: the owner's applies)."""
        return self.root / AGENT_PROMPT_RELPATH

    def read_agent_prompt(self) -> str | None:
        """The chat's own agent prompt, or None when it has none (no subprocess then).

        Raises:
            ChatHomeError: git failed or the file cannot be read.
        """
        if _stamp(self.agent_prompt_path) is None:
            return None
        return self._read_committed(self.agent_prompt_path, AGENT_PROMPT_RELPATH)

    def write_agent_prompt(self, text: str, message: str) -> bool:
        """Set the chat's own agent prompt and commit it; False when nothing changed.

        Raises:
            ChatHomeError: git failed or the file cannot be written.
        """
        self.ensure()
        self._pick_up_hand_edit(AGENT_PROMPT_RELPATH)
        path = self.agent_prompt_path
        if _stamp(path) is not None and self._read(path) == text:
            return False
        _PROMPTS.forget(path)
        self._write(text, path)
        return self._commit_prompt(message, AGENT_PROMPT_RELPATH)

    def reset_agent_prompt(self, message: str) -> bool:
        """Drop the chat's own agent prompt (a commit), so the owner's applies again; False
        when it had none.

        Raises:
            ChatHomeError: git failed or the file cannot be removed.
        """
        path = self.agent_prompt_path
        if not self.exists() or _stamp(path) is None:
            return False
        _PROMPTS.forget(path)
        try:
            path.unlink()
        except OSError as exc:
            raise ChatHomeError(f"cannot remove {path}: {exc.strerror or exc}") from None
        return self._commit_prompt(message, AGENT_PROMPT_RELPATH)

    def write_prompt(self, text: str, message: str) -> bool:
        """Replace the prompt and commit it with `message`; False when nothing changed.

        A pending hand edit is committed first, so it stays in the history.

        Raises:
            ChatHomeError: git failed or the file cannot be written.
        """
        self.ensure()
        self._pick_up_hand_edit()
        if self._read() == text:
            return False
        _PROMPTS.forget(self.prompt_path)
        self._write(text)
        return self._commit_prompt(message)

    def remove(self) -> bool:
        """Delete the chat home (its channel or thread is gone); False if there was none.

        Never raises: a home that cannot be removed is logged and left.
        """
        _PROMPTS.forget(self.prompt_path)
        _PROMPTS.forget(self.agent_prompt_path)
        if not self.root.exists():
            return False
        try:
            shutil.rmtree(self.root)
        except OSError as exc:
            logger.warning("cannot remove the chat home %s: %s", self.root, exc.strerror or exc)
            return False
        return True

    def history(self) -> list[PromptVersion]:
        """The prompt's versions, newest first; empty when the chat has no home yet.

        Raises:
            ChatHomeError: git failed.
        """
        if not self.exists():
            return []
        self.ensure()
        self._pick_up_hand_edit()
        fmt = _FIELD_SEP.join(("%H", "%aI", "%s"))
        out = self._git("log", f"--format={fmt}", "--", PROMPT_RELPATH)
        versions = []
        for line in out.splitlines():
            commit, date, subject = line.split(_FIELD_SEP, 2)
            versions.append(PromptVersion(commit, date, subject))
        return versions

    def history_with_diffs(
        self, limit: int, relpath: str = PROMPT_RELPATH
    ) -> list[tuple[PromptVersion, str]]:
        """The newest `limit` versions of a prompt (the discriminator's unless `relpath` says
        another), newest first, each with its change as a unified diff.

        One git call (the first version's diff adds the whole file); a pending hand edit is
        committed first. Empty when the chat has no home yet.

        Raises:
            ChatHomeError: git failed.
        """
        if not self.exists():
            return []
        self._pick_up_hand_edit(relpath)
        fmt = _RECORD_SEP + _FIELD_SEP.join(("%H", "%aI", "%s"))
        out = self._git("log", "-p", "--no-color", f"-n{limit}", f"--format={fmt}", "--", relpath)
        versions = []
        for record in out.split(_RECORD_SEP)[1:]:
            header, _, patch = record.partition("\n")
            commit, date, subject = header.split(_FIELD_SEP, 2)
            versions.append((PromptVersion(commit, date, subject), patch.strip("\n")))
        return versions
