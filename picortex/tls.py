"""One client TLS context per process, shared by every HTTP client the bot opens.

Building a context loads a certificate authority bundle: about 25 ms of CPU on the event
loop's thread. The REST client and the model client each need one, and the model client is
made anew each time its actor restarts, so a context per client would stall the loop at every
start and restart. A context is built again only when the environment's certificate settings
change (`SSL_CERT_FILE`, `SSL_CERT_DIR`, or the named file itself), so a private certificate
authority set in the environment is still honoured exactly as httpx's own `trust_env` does.
"""

from __future__ import annotations

import functools
import os
import ssl

import httpx


def tls_context() -> ssl.SSLContext:
    """The verifying client context for the current certificate settings (built once)."""
    cert_file = os.environ.get("SSL_CERT_FILE") or None
    return _context(cert_file, os.environ.get("SSL_CERT_DIR") or None, _mtime(cert_file))


def _mtime(path: str | None) -> int | None:
    """When the named bundle last changed: a replaced file gives a fresh context."""
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


@functools.lru_cache(maxsize=4)
def _context(cert_file: str | None, cert_dir: str | None, mtime: int | None) -> ssl.SSLContext:
    """Build the context; the arguments are the cache key, httpx reads the same variables."""
    return httpx.create_ssl_context(trust_env=True)
