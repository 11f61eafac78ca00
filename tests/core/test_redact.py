"""Redaction of Discord tokens, `mfa.` tokens and `sk-ant-` keys in text, values and JSON."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.core.redact import REDACTED, redact, redact_json_bytes, redact_obj

B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

BOT_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456789AB"
OLD_TOKEN = "NDU2Nzg5MDEyMzQ1Njc4OTAx.XyZ12a.abcdefghijklmnopqrstuvwxy_-"
MFA_TOKEN = "mfa." + "A1b2C3d4E5f6G7h8I9j0" * 4 + "KLMN"
API_KEY = "sk-ant-api03-" + "Zx9_Yw8-Vu7" * 8 + "AA"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_each_secret_shape_alone_is_redacted() -> None:
    for secret in (BOT_TOKEN, OLD_TOKEN, MFA_TOKEN, API_KEY):
        assert redact(secret) == REDACTED


def test_secrets_inside_text_keep_the_text_around_them() -> None:
    text = f"token={BOT_TOKEN} key:{API_KEY}, mfa ({MFA_TOKEN})."
    assert redact(text) == f"token={REDACTED} key:{REDACTED}, mfa ({REDACTED})."


def test_secret_glued_to_words_and_dots_is_still_redacted() -> None:
    glued = "prefix" + BOT_TOKEN + "suffix"
    assert redact(glued) == REDACTED
    dotted = "a" * 25 + ".bbbbbbb." + BOT_TOKEN
    out = redact(dotted)
    assert BOT_TOKEN.split(".")[2] not in out


@pytest.mark.parametrize(
    "text",
    [
        "hello world. this is fine.",
        "picortex.runtime.supervisor",
        "https://discord.com/api/v10/channels/123456789012345678/messages",
        "version 1.2.3 and 2025-06-01T12:00:00.123Z",
        "cost 0.00012371304336792233 usd",
        "123456789012345678",
        "mfa. is a prefix, sk-ant is not a key",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_redact_obj_walks_keys_values_lists_and_tuples() -> None:
    obj = {
        "token": BOT_TOKEN,
        BOT_TOKEN: 1,
        "nested": [{"k": f"Bot {BOT_TOKEN}"}, (API_KEY, 3, None)],
        "n": 5,
    }
    out = redact_obj(obj)
    assert out == {
        "token": REDACTED,
        REDACTED: 1,
        "nested": [{"k": f"Bot {REDACTED}"}, (REDACTED, 3, None)],
        "n": 5,
    }
    assert obj["token"] == BOT_TOKEN  # the input is not changed


def test_json_bytes_are_redacted_and_stay_valid() -> None:
    lines = [
        orjson.dumps({"event": "a", "content": f"see {BOT_TOKEN}", BOT_TOKEN: "key"}),
        orjson.dumps({"event": "b", "content": "nothing here", "n": 1.5}),
        orjson.dumps({"event": "c", "content": f"\n{BOT_TOKEN}\t\x1b{BOT_TOKEN}"}),
    ]
    data = b"\n".join(lines) + b"\n"
    out = redact_json_bytes(data)
    assert BOT_TOKEN.encode() not in out
    parsed = [orjson.loads(line) for line in out.splitlines()]
    assert parsed[0] == {"event": "a", "content": f"see {REDACTED}", REDACTED: "key"}
    assert parsed[1] == orjson.loads(lines[1])
    assert parsed[2]["content"] == f"\n{REDACTED}\t\x1b{REDACTED}"


def test_clean_json_bytes_come_back_as_the_same_object() -> None:
    data = orjson.dumps({"event": "x", "content": "hello.world.again"}) + b"\n"
    assert redact_json_bytes(data) is data


# -- property: no generated secret survives ---------------------------------------------


@st.composite
def discord_tokens(draw: st.DrawFn) -> str:
    user_id = draw(st.integers(min_value=10**16, max_value=10**20 - 1))
    first = _b64(str(user_id).encode())
    second = draw(st.text(B64URL, min_size=6, max_size=7))
    third = draw(st.text(B64URL, min_size=27, max_size=40))
    return f"{first}.{second}.{third}"


mfa_tokens = st.text(B64URL, min_size=20, max_size=90).map(lambda s: "mfa." + s)
anthropic_keys = st.builds(
    lambda kind, body: f"sk-ant-{kind}-{body}",
    st.sampled_from(["api03", "admin01", "oat01"]),
    st.text(B64URL, min_size=1, max_size=100),
)
secrets = st.one_of(discord_tokens(), mfa_tokens, anthropic_keys)

# Surrounding text: token characters, dots, quotes, backslashes, control and non-ASCII chars.
_PIECES = [*(B64URL[:10] + B64URL[-12:] + ".\"'\\ \n\t\x1b/:=?&é€"), "mfa.", "x" * 24 + "."]
around = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(secret=secrets, before=around, after=around)
def test_no_secret_survives_in_text(secret: str, before: str, after: str) -> None:
    text = before + secret + after
    out = redact(text)
    assert secret not in out
    if secret.startswith("sk-ant-"):
        return
    secret_part = secret.split(".")[-1]
    if secret_part not in before + after:
        assert secret_part not in out


@settings(max_examples=300, deadline=None)
@given(secret=secrets, before=around, after=around, key=st.booleans())
def test_no_secret_survives_in_json_lines(secret: str, before: str, after: str, key: bool) -> None:
    value = before + secret + after
    record = {"event": "x", value: 1} if key else {"event": "x", "content": value, "n": [value]}
    data = orjson.dumps({"event": "first"}) + b"\n" + orjson.dumps(record) + b"\n"
    out = redact_json_bytes(data)
    assert secret.encode() not in out
    first, second = (orjson.loads(line) for line in out.splitlines())
    assert first == {"event": "first"}
    assert secret not in orjson.dumps(second).decode()


@settings(max_examples=150, deadline=None)
@given(secret=secrets, before=around)
def test_no_secret_survives_in_urls(secret: str, before: str) -> None:
    url = f"https://example.com/cb?state={quote(before)}&token={secret}&x=1"
    assert secret not in redact(url)
    nested = redact_obj({"links": [url], "about": f"Authorization: Bot {secret}"})
    assert secret not in orjson.dumps(nested).decode()


def test_sk_ant_is_redacted_in_any_case() -> None:
    for key in ("SK-ANT-api03-abcdefGHIJ", "Sk-Ant-abc_def-ghi"):
        assert redact(f"key {key} end") == f"key {REDACTED} end"
        line = orjson.dumps({"error": f"bad {key}"})
        assert key.encode() not in redact_json_bytes(line)
        assert orjson.loads(redact_json_bytes(line)) == {"error": f"bad {REDACTED}"}


def test_configured_secrets_of_any_shape_are_redacted_exactly() -> None:
    from picortex.core.redact import remember_secrets

    gateway_key = "gw_live/Abc+123=xyz?q"  # a gateway's key: not an sk-ant- shape
    token = "plain-token-without-dots-0042"
    remember_secrets(gateway_key, token, "", None, "short")
    encoded = quote(gateway_key, safe="")
    text = f"401: key {gateway_key} rejected; url ?t={quote(token, safe='')} and {encoded}"
    out = redact(text)
    assert gateway_key not in out and token not in out
    assert quote(gateway_key, safe="") not in out
    lower_escapes = re.sub(
        "%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(gateway_key, safe="")
    )
    assert redact(f"<{lower_escapes}>") == f"<{REDACTED}>"
    assert "short" in redact("a short word")  # too short to be taken as a secret
    line = orjson.dumps({"body": f"echo {gateway_key}\n{token}", "n": 1}) + b"\n"
    cleaned = redact_json_bytes(line)
    assert gateway_key.encode() not in cleaned and token.encode() not in cleaned
    assert orjson.loads(cleaned) == {"body": f"echo {REDACTED}\n{REDACTED}", "n": 1}
    assert redact_obj({"k": [token]}) == {"k": [REDACTED]}


def test_a_configured_secret_after_a_json_escape_keeps_the_line_valid() -> None:
    from picortex.core.redact import remember_secrets

    secret = "nkey-value-0123456789"
    remember_secrets(secret)
    line = orjson.dumps({"e": "x\n" + secret})
    cleaned = redact_json_bytes(line)
    assert orjson.loads(cleaned)["e"].startswith("x\n")
    assert secret[1:].encode() not in cleaned


def test_a_database_password_is_a_secret_in_every_form_a_connection_string_takes() -> None:
    from picortex.core.redact import remember_secrets, url_secrets

    assert url_secrets(None) == ()
    # A key/value connection string, quoted (backslash escapes) or not.
    dsn = r"host=db.example password='pa\'ss word-0042' dbname=picortex"
    assert "pa'ss word-0042" in url_secrets(dsn)
    assert "bare-password-0042" in url_secrets("host=db password=bare-password-0042")
    # A URL: a short password is caught with its user name.
    url = "postgresql://picortex:pw@db.example:5432/picortex"
    assert "picortex:pw" in url_secrets(url)
    remember_secrets(*url_secrets(dsn), *url_secrets(url))
    said = redact(
        "password='pa\\'ss' ... pa'ss word-0042 ... postgresql://picortex:pw@other.host/x"
    )
    assert "pa'ss word-0042" not in said and "picortex:pw" not in said
