"""One TLS context per process: shared by every client, rebuilt when the settings change."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trustme

from picortex import tls
from picortex.actors.llm import model_http_client
from picortex.discord.http import discord_client


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the contexts built (each one loads a certificate bundle)."""
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    tls._context.cache_clear()
    built: list[int] = []
    create = tls.httpx.create_ssl_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        built.append(1)
        return create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tls.httpx, "create_ssl_context", counting)
    return built


async def test_every_client_shares_one_context(counted: list[int]) -> None:
    first = tls.tls_context()
    async with discord_client(), discord_client():
        pass
    for _ in range(3):  # the model client is made anew at each actor (re)start
        await model_http_client().aclose()
    assert tls.tls_context() is first
    assert counted == [1]
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname


def test_a_certificate_file_from_the_environment_gets_its_own_context(
    counted: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = tls.tls_context()
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    private = tls.tls_context()
    assert private is not default
    assert len(private.get_ca_certs()) == 1  # only the named authority is trusted
    assert tls.tls_context() is private
    # A replaced bundle (a rotated certificate authority) is read again.
    trustme.CA().cert_pem.write_to_path(str(bundle))
    stat = bundle.stat()
    os.utime(bundle, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert tls.tls_context() is not private
    monkeypatch.delenv("SSL_CERT_FILE")
    assert tls.tls_context() is default
    assert counted == [1, 1, 1]
