"""`picortex demo` with a key the model endpoint refuses (tests/e2e/test_demo.py: `--offline`)."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from picortex.cli.demo import run_demo

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


@pytest.mark.long(seconds=4)
def test_a_refused_key_ends_each_scene_at_once_and_suggests_offline(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # In this process (tests/e2e/test_demo.py runs `picortex demo` as a child).
    out = io.StringIO()
    with refusing_model() as base_url:
        env = {"ANTHROPIC_API_KEY": BAD_KEY, "ANTHROPIC_BASE_URL": base_url}
        code = run_demo(keep=False, speed=8, out=out, env=env)
    text, err = out.getvalue(), capfd.readouterr().err
    assert code == 1, text + err
    assert "model: real Claude" in text
    assert "the model failed (" in text
    assert "this scene stops here" in text
    assert "`picortex demo --offline`" in text.split("Some scenes did not finish")[1]
    assert "within 30 s" not in text
    # Scenes are printed in order, each header once.
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", text, flags=re.MULTILINE)]
    assert numbers == list(range(1, 16))
    # The staged failure of scene 9 is reported under scene 9, not after it.
    scene9 = text.split("[9] ")[1].split("[10] ")[0]
    assert "invocation failed at stage" in scene9
    assert BAD_KEY not in text + err
    assert "Traceback" not in text + err
