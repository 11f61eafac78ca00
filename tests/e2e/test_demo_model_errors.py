"""`picortex demo` with a key the model endpoint refuses, and `demo --offline`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson

BAD_KEY = "sk-ant-not-a-working-key"


class _Refusing(BaseHTTPRequestHandler):
    """Answers every request as the Messages API does for a bad key."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        body = orjson.dumps(
            {
                "type": "error",
                "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            }
        )
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextmanager
def refusing_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PICORTEX_"))}
    env["TMPDIR"] = str(tmp_path)
    return env


def test_a_refused_key_ends_each_scene_at_once_and_suggests_offline(tmp_path: Path) -> None:
    with refusing_model() as base_url:
        env = {**_env(tmp_path), "ANTHROPIC_API_KEY": BAD_KEY, "ANTHROPIC_BASE_URL": base_url}
        done = subprocess.run(
            [sys.executable, "-m", "picortex", "demo", "--speed", "4"],
            capture_output=True,
            text=True,
            env=env,
            # Eleven scenes each waiting out their 30 s would take five minutes.
            timeout=150,
            check=False,
        )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "model: real Claude" in out
    assert "the model failed (" in out
    assert "this scene stops here" in out
    assert "`picortex demo --offline`" in out.split("Some scenes did not finish")[1]
    assert "within 30 s" not in out
    # Scenes are printed in order, each header once.
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", out, flags=re.MULTILINE)]
    assert numbers == list(range(1, 14))
    # The staged failure of scene 9 is reported under scene 9, not after it.
    scene9 = out.split("[9] ")[1].split("[10] ")[0]
    assert "invocation failed at stage" in scene9
    assert BAD_KEY not in out + done.stderr
    assert "Traceback" not in out + done.stderr


def test_offline_forces_the_offline_model_and_says_so(tmp_path: Path) -> None:
    env = {
        **_env(tmp_path),
        "ANTHROPIC_API_KEY": BAD_KEY,
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "picortex", "demo", "--offline", "--speed", "4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "OFFLINE model endpoint (--offline)" in out
    assert "the model failed" not in out
