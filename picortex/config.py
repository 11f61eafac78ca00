"""Settings: `picortex.toml`, then the environment, then runtime overrides from the database.

Every key of SPEC section 3 is validated here; a bad value is one ConfigError sentence that
names the key and where it came from. Runtime overrides are dotted keys with text values.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast

import attrs
import orjson

from picortex.core.agent_prompt import PROMPT_MAX_CHARS
from picortex.core.discriminate import Classifier
from picortex.core.llm import DEFAULT_MAX_TOKENS
from picortex.core.redact import remember_secrets, url_secrets
from picortex.core.shards import SHARD_COUNT_MAX, ShardSpec, parse_shards
from picortex.errors import ConfigError, PicortexError

logger = logging.getLogger(__name__)

ATTENTION_MODES: Final = ("always", "mentions-only", "discriminate", "discriminate-quiet", "silent")
REPLY_MODES: Final = ("channel", "dm")
ROUTES: Final = ("fixed", "auto")  # [models] route: tiers by persona only, or by the request
PERIODS: Final = ("day", "month")
DEFAULT_HOME: Final = "~/.picortex"
DEFAULT_API_BASE: Final = "https://discord.com/api/v10"
CONFIG_FILE_NAME: Final = "picortex.toml"
DB_FILE_NAME: Final = "picortex.db"
WAKEWORD_MAX_CHARS: Final = 8  # SPEC 3: short enough to type on a phone, long enough to be rare
# Discord snowflakes are unsigned 64-bit; SQLite stores signed 64-bit, and real ids fit in it.
SNOWFLAKE_MAX: Final = 2**63 - 1
PORT_MAX: Final = 65535
OVERRIDES_PREFIX: Final = "response_policy.overrides."
NO_OVERRIDE: Final = "none"  # runtime value that removes a per-command override
PRICES_PREFIX: Final = "prices."  # `prices.<model>.input` / `.output` at runtime
PRICE_FIELDS: Final = ("input", "output")
_GOT_MAX_CHARS: Final = (
    60  # a quoted bad value longer than this is cut, so the error stays one line
)
# Upper bounds of numeric keys: a typo or a hostile `config set` must not make one answer
# cost a fortune, a window last for days or a prompt hold a novel. Keys without their own
# bound get these.
NUMBER_MAX: Final = 1_000_000.0
COUNT_MAX: Final = 1_000_000
SECONDS_MAX: Final = 3_600.0  # an hour: longer windows and cooldowns are typos
CONTEXT_MESSAGES_MAX: Final = 100  # Discord's own page size; more is noise to the model
CONTEXT_CHARS_MAX: Final = 50_000  # ~17k tokens: a big prompt, still cents per answer
HISTORY_MAX: Final = 50  # the discriminator must stay under $0.001 a call (SPEC 7)
DISCRIMINATOR_TIMEOUT_MAX: Final = 60.0  # a classifier slower than a minute is broken
POLL_SECONDS_MAX: Final = 7 * 24 * 3600.0  # a week, like Discord's own polls
BYTES_MAX: Final = 10 * 1024**3  # 10 GiB of cache or log is more than any small server needs
CACHE_MESSAGES_MAX: Final = 10_000
USD_MAX: Final = 10_000.0  # per workspace, per user; a ceiling above this is no ceiling
GLOBAL_USD_MAX: Final = 100_000.0
REQUESTS_PER_MINUTE_MAX: Final = 600
PRICE_MAX: Final = 1_000.0  # USD per million tokens; list prices are a few dollars
COMPOST_THRESHOLD_MAX: Final = 1_000  # more errors an hour than this is no pattern, a fire
LEASE_SECONDS_MAX: Final = 600.0  # a dead process's shards wait this long for a new holder
PAUSE_SECONDS_MAX: Final = 24 * 3600.0  # a day: past that, fix the cause rather than wait
AGENT_PROMPT_MAX_CHARS: Final = PROMPT_MAX_CHARS
# An answer's output ceiling: the budget reserves the whole of it before each call.
AGENT_MAX_TOKENS_MAX: Final = 32_000


@attrs.frozen
class Price:
    """USD per million tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost in USD of one call with these token counts."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


BUILTIN_PRICES: Final[Mapping[str, Price]] = MappingProxyType(
    {
        "claude-haiku-5-5": Price(0.10, 0.50),
        "claude-sonnet-5-5": Price(2.0, 10.0),
        "claude-opus-5-5": Price(4.0, 20.0),
    }
)


def _proxy(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@attrs.frozen
class ResponsePolicySettings:
    """Where replies go (SPEC 6): override > sensitive list > default mode."""

    default_mode: str = "channel"
    sensitive_commands: tuple[str, ...] = ("whitelist", "config")
    overrides: Mapping[str, str] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_proxy
    )


@attrs.frozen
class ReplySettings:
    """How answers are shown (SPEC 16)."""

    # Stream the answer: post the first sentence, then edit the reply as it grows.
    stream: bool = True


@attrs.frozen
class AttentionSettings:
    """Default attention modes for chats without their own (SPEC 7)."""

    dm: str = "always"
    group: str = "mentions-only"


@attrs.frozen
class DiscriminatorSettings:
    """The attention classifier (SPEC 7)."""

    model: str = "claude-haiku-5-5"
    timeout_seconds: float = 5.0
    history: int = 6


@attrs.frozen
class AgentSettings:
    """The default agent's voice (SPEC 18): the owner's system prompt and answer length.

    An empty `system_prompt` is the built-in one; `system_prompt_file` (relative to
    `PICORTEX_HOME`) is read at start into `system_prompt`.
    """

    system_prompt: str = ""
    system_prompt_file: str = ""
    max_tokens: int = DEFAULT_MAX_TOKENS


@attrs.frozen
class ModelTiers:
    """Model ids per tier (SPEC 3)."""

    triage: str = "claude-haiku-5-5"
    general: str = "claude-sonnet-5-5"
    complex: str = "claude-opus-5-5"
    # "fixed": `general` unless a persona names its tier; "auto": the request picks (SPEC 18).
    route: str = "fixed"


@attrs.frozen
class CompostSettings:
    """Failure patterns that pause a persona or a stage (SPEC 18)."""

    # Unresolved errors of one persona (or stage) within an hour that pause it; 0 = never.
    threshold: int = 5
    pause_seconds: float = 600.0


@attrs.frozen
class BudgetSettings:
    """Spending ceilings (SPEC 9): per workspace and period, all workspaces, per user."""

    ceiling_usd: float = 5.0
    period: str = "day"
    global_ceiling_usd: float = 20.0
    user_daily_usd: float = 1.0  # 0 = no limit
    user_requests_per_minute: int = 6  # 0 = no limit


@attrs.frozen
class WebSettings:
    """The admin panel (SPEC 13): loopback only unless `host` says otherwise."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8765
    # Session cookies marked Secure (sent over HTTPS only); unset: on unless `host` is loopback.
    secure_cookies: bool | None = None

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach the panel."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def cookies_secure(self) -> bool:
        """Whether the panel marks its cookies Secure."""
        return self.secure_cookies if self.secure_cookies is not None else not self.loopback


@attrs.frozen
class SlashSettings:
    """`/picortex` application commands (SPEC 15)."""

    enabled: bool = True
    # Registered per guild (updates show at once) instead of globally; empty: global.
    guild_ids: tuple[int, ...] = ()


@attrs.frozen
class AccessSettings:
    """Access by role and channel (SPEC 18): role ids that count as `user` tier, channel ids
    the bot is limited to (empty: all) and channel ids where it stays silent."""

    allow_roles: tuple[int, ...] = ()
    allow_channels: tuple[int, ...] = ()
    deny_channels: tuple[int, ...] = ()


@attrs.frozen
class ClusterSettings:
    """Which shards this process serves (SPEC 17): `shards` (None: `--shard`, else 0/1),
    at most `capacity` of them (None: all it names), leases of `lease_seconds`."""

    shards: ShardSpec | None = None
    capacity: int | None = None
    lease_seconds: float = 10.0


def _secret_repr(value: str | None) -> str:
    return "None" if value is None else "'[hidden]'"


@attrs.frozen
class Settings:
    """The effective configuration. Secrets are hidden from repr and str."""

    home: Path
    owner_id: int | None = None
    wakeword: str = "!s"
    continuation_seconds: float = 10.0
    context_messages: int = 15
    context_chars: int = 4000
    fetch_cooldown_seconds: float = 5.0
    cache_max_bytes: int = 52_428_800
    cache_messages_per_channel: int = 200
    action_log_max_bytes: int = 5_242_880
    poll_enabled: bool = False
    poll_seconds: float = 120.0
    # After a fresh gateway session, missed triggers this recent are answered (SPEC 4).
    catch_up_seconds: float = 120.0
    response_policy: ResponsePolicySettings = ResponsePolicySettings()
    replies: ReplySettings = ReplySettings()
    attention: AttentionSettings = AttentionSettings()
    discriminator: DiscriminatorSettings = DiscriminatorSettings()
    agent: AgentSettings = AgentSettings()
    models: ModelTiers = ModelTiers()
    composting: CompostSettings = CompostSettings()
    budget: BudgetSettings = BudgetSettings()
    web: WebSettings = WebSettings()
    slash: SlashSettings = SlashSettings()
    access: AccessSettings = AccessSettings()
    cluster: ClusterSettings = ClusterSettings()
    prices: Mapping[str, Price] = attrs.field(factory=lambda: BUILTIN_PRICES, converter=_proxy)
    discord_token: str | None = attrs.field(default=None, repr=_secret_repr)
    api_base: str = DEFAULT_API_BASE
    anthropic_api_key: str | None = attrs.field(default=None, repr=_secret_repr)
    anthropic_base_url: str | None = None
    # PostgreSQL shared by a cluster (SPEC 17); None: the home's SQLite file.
    database_url: str | None = attrs.field(default=None, repr=_secret_repr)
    action_log_path: Path = attrs.field(
        default=attrs.Factory(lambda s: s.home / "actions.jsonl", takes_self=True)
    )
    cache_dir: Path = attrs.field(
        default=attrs.Factory(lambda s: s.home / "cache", takes_self=True)
    )
    db_path: Path = attrs.field(
        default=attrs.Factory(lambda s: s.home / DB_FILE_NAME, takes_self=True)
    )
    fault_inject: str = ""

    @property
    def config_path(self) -> Path:
        """Where `picortex.toml` is read from."""
        return self.home / CONFIG_FILE_NAME

    def price_for(self, model: str) -> Price:
        """The model's price; a model without one costs as the dearest known model."""
        price = self.prices.get(model)
        if price is not None:
            return price
        return max(self.prices.values(), key=lambda p: (p.input + p.output, p.output))

    def classifier(self, chat_model: str | None = None) -> Classifier:
        """How a chat's messages are classified: its own `discriminator_model` (blank: none),
        else `discriminator.model`, at that model's price."""
        model = (
            chat_model.strip() if chat_model and chat_model.strip() else self.discriminator.model
        )
        price = self.price_for(model)
        return Classifier(
            model=model,
            input_usd=price.input,
            output_usd=price.output,
            timeout_seconds=self.discriminator.timeout_seconds,
            history=self.discriminator.history,
        )

    def value_of(self, key: str) -> object:
        """The value of a dotted key such as `attention.group` (ConfigError if unknown)."""
        if key.startswith(OVERRIDES_PREFIX):
            return self.response_policy.overrides.get(key[len(OVERRIDES_PREFIX) :])
        price_key = _price_key(key)
        if price_key is not None:
            price = self.prices.get(price_key[0])
            return None if price is None else getattr(price, price_key[1])
        if key not in _KEYS:
            raise ConfigError(f"unknown config key {_show(key)}")
        head, _, rest = key.partition(".")
        value: object = getattr(self, head)
        return getattr(value, rest) if rest else value

    def with_runtime(self, overrides: Mapping[str, str]) -> Settings:
        """These settings with runtime overrides (dotted keys, text values) applied.

        Unknown keys are logged and skipped, since a stored key may come from an older
        version; a bad value raises ConfigError naming the key and the database.
        """
        result = self
        for raw_key, text in sorted(overrides.items()):
            try:
                key = runtime_key(raw_key)
            except ConfigError:
                logger.warning(
                    "%s: unknown runtime config key %s is ignored", self.db_path, raw_key
                )
                continue
            try:
                value = parse_runtime_value(key, text)
            except ConfigError as exc:
                raise ConfigError(f"{self.db_path} (runtime config): {exc}") from None
            result = _set_key(result, key, value)
        return result


# ---- validation --------------------------------------------------------------------------


@attrs.frozen
class Bounds:
    """What a key accepts, for forms and help: the kind of value and its limits.

    `kind` is `number` (any number), `count` (a whole number), `bool`, `choice`, `list`
    (comma-separated) or `text`; `minimum` and `maximum` bound a number, or a text's length.
    """

    kind: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    rule: str = ""  # for text and lists: the rule in words

    def describe(self) -> str:
        """The bounds in words, e.g. `0 to 100` or `one of day, month`."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.rule:
            return self.rule
        if self.kind in ("number", "count") and self.maximum is not None:
            low = format_value(self.minimum or 0)
            whole = "a whole number, " if self.kind == "count" else ""
            return f"{whole}{low} to {format_value(self.maximum)}"
        return ""


_Check = TypeVar("_Check", bound=Callable[[str, object], object])
# Each check's bounds, filled as checks are made: a key's form is built from its check.
_BOUNDS: Final[dict[Callable[[str, object], object], Bounds]] = {}


def _bounded(check: _Check, bounds: Bounds) -> _Check:
    _BOUNDS[check] = bounds
    return check


class _Invalid(PicortexError):
    """A bad value; the message is the sentence without its source prefix."""


def _show(value: object) -> str:
    """A bad value as the user wrote it, quoted, cut to one short line."""
    if isinstance(value, float) and not math.isfinite(value):
        text = repr(value)  # JSON has no nan or inf; TOML spells them like Python
    else:
        try:
            text = orjson.dumps(value).decode()
        except TypeError:
            text = repr(value)
    if len(text) > _GOT_MAX_CHARS:
        text = text[: _GOT_MAX_CHARS - 3] + "..."
    return text


def _check_snowflake(key: str, value: object) -> int | None:
    if value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        number: object = int(value.strip())
    else:
        number = value
    if isinstance(number, int) and not isinstance(number, bool) and 0 < number <= SNOWFLAKE_MAX:
        return number
    raise _Invalid(f"{key} must be a Discord user id (a positive integer), got {_show(value)}")


def _check_wakeword(key: str, value: object) -> str:
    if (
        isinstance(value, str)
        and 1 <= len(value) <= WAKEWORD_MAX_CHARS
        and not any(c.isspace() for c in value)
    ):
        return value
    raise _Invalid(
        f"{key} must be 1-{WAKEWORD_MAX_CHARS} characters without spaces, got {_show(value)}"
    )


def _too_big(key: str, maximum: float, value: object) -> _Invalid:
    return _Invalid(f"{key} must be at most {format_value(maximum)}, got {_show(value)}")


def _check_number(what: str, maximum: float = NUMBER_MAX) -> Callable[[str, object], float]:
    def check(key: str, value: object) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number) and number >= 0:
                if number > maximum:
                    raise _too_big(key, maximum, value)
                return number
        raise _Invalid(f"{key} must be {what}, 0 or more, got {_show(value)}")

    return _bounded(check, Bounds("number", 0, maximum))


def _check_count(what: str, maximum: int = COUNT_MAX) -> Callable[[str, object], int]:
    def check(key: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            if value > maximum:
                raise _too_big(key, maximum, value)
            return value
        raise _Invalid(f"{key} must be {what}, 0 or more, got {_show(value)}")

    return _bounded(check, Bounds("count", 0, maximum))


def _check_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise _Invalid(f"{key} must be true or false, got {_show(value)}")


def _check_choice(choices: tuple[str, ...]) -> Callable[[str, object], str]:
    if len(choices) == 2:
        wanted = f'"{choices[0]}" or "{choices[1]}"'
    else:
        wanted = "one of " + ", ".join(choices)

    def check(key: str, value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise _Invalid(f"{key} must be {wanted}, got {_show(value)}")

    return _bounded(check, Bounds("choice", choices=choices))


def _check_model(key: str, value: object) -> str:
    if isinstance(value, str) and value.strip() and not any(c.isspace() for c in value):
        return value
    raise _Invalid(f"{key} must be a model id such as claude-haiku-5-5, got {_show(value)}")


def _check_host(key: str, value: object) -> str:
    if isinstance(value, str) and value.strip() and not any(c.isspace() for c in value):
        return value.strip()
    raise _Invalid(f"{key} must be a host name or address such as 127.0.0.1, got {_show(value)}")


def _check_port(key: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= PORT_MAX:
        return value
    raise _Invalid(f"{key} must be a TCP port, 0-{PORT_MAX} (0: any free port), got {_show(value)}")


_COMMAND_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def _check_commands(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, list | tuple) and all(
        isinstance(v, str) and _COMMAND_NAME.fullmatch(v) for v in value
    ):
        return tuple(dict.fromkeys(value))  # keeps order, drops repeats
    raise _Invalid(f"{key} must be a list of lowercase command names, got {_show(value)}")


def _check_prompt(key: str, value: object) -> str:
    if isinstance(value, str) and len(value) <= AGENT_PROMPT_MAX_CHARS:
        return value.replace("\r\n", "\n")  # a browser's form sends CRLF line breaks
    raise _Invalid(
        f"{key} must be text of at most {AGENT_PROMPT_MAX_CHARS} characters, got {_show(value)}"
    )


def _check_prompt_file(key: str, value: object) -> str:
    if isinstance(value, str) and not Path(value).is_absolute() and ".." not in Path(value).parts:
        return value.strip()
    raise _Invalid(f"{key} must be a file path inside PICORTEX_HOME, got {_show(value)}")


def _check_max_tokens(key: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        if value > AGENT_MAX_TOKENS_MAX:
            raise _too_big(key, AGENT_MAX_TOKENS_MAX, value)
        return value
    raise _Invalid(f"{key} must be a whole number of tokens, 1 or more, got {_show(value)}")


_check_reply_mode = _check_choice(REPLY_MODES)
_BOUNDS.update(
    {
        _check_wakeword: Bounds(
            "text",
            1,
            WAKEWORD_MAX_CHARS,
            rule=f"1-{WAKEWORD_MAX_CHARS} characters without spaces",
        ),
        _check_bool: Bounds("bool"),
        _check_model: Bounds("text", 1, rule="a model id such as claude-haiku-5-5"),
        _check_port: Bounds("count", 0, PORT_MAX),
        _check_commands: Bounds("list", rule="lowercase command names, comma-separated"),
        _check_prompt: Bounds(
            "text",
            0,
            AGENT_PROMPT_MAX_CHARS,
            rule=f"text, up to {AGENT_PROMPT_MAX_CHARS} characters (empty: the built-in prompt);"
            " {{bot_name}}, {{chat_name}}, {{chat_kind}}, {{server_name}} and {{date}}"
            " are filled in",
        ),
        _check_prompt_file: Bounds("text", rule="a file path relative to PICORTEX_HOME"),
        _check_max_tokens: Bounds("count", 1, AGENT_MAX_TOKENS_MAX),
    }
)


def _check_shards(key: str, value: object) -> ShardSpec:
    if not isinstance(value, str):
        raise _Invalid(f'{key} must be text such as "0-3/8" or "auto/8", got {_show(value)}')
    try:
        return parse_shards(value, key)
    except ConfigError as exc:
        raise _Invalid(str(exc)) from None


def _check_capacity(key: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        if value > SHARD_COUNT_MAX:
            raise _too_big(key, SHARD_COUNT_MAX, value)
        return value
    raise _Invalid(f"{key} must be a whole number of shards, 1 or more, got {_show(value)}")


def _check_lease(key: str, value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
        if value > LEASE_SECONDS_MAX:
            raise _too_big(key, LEASE_SECONDS_MAX, value)
        return float(value)
    raise _Invalid(f"{key} must be a number of seconds, 1 or more, got {_show(value)}")


def _check_ids(what: str) -> Callable[[str, object], tuple[int, ...]]:
    def check(key: str, value: object) -> tuple[int, ...]:
        if isinstance(value, list | tuple):
            try:
                ids = [_check_snowflake(key, v) for v in value]
            except _Invalid:
                pass
            else:
                return tuple(dict.fromkeys(i for i in ids if i is not None))
        raise _Invalid(f"{key} must be a list of Discord {what} ids, got {_show(value)}")

    _BOUNDS[check] = Bounds("list", rule=f"Discord {what} ids, comma-separated (empty: none)")
    return check


_check_guild_ids = _check_ids("guild")


def _check_overrides(key: str, value: object) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise _Invalid(f'{key} must be a table of command = "channel" or "dm", got {_show(value)}')
    result: dict[str, str] = {}
    for command, mode in value.items():
        if not _COMMAND_NAME.fullmatch(command):
            raise _Invalid(f"{key} must name lowercase commands, got {_show(command)}")
        result[command] = _check_reply_mode(f"{key}.{command}", mode)
    return MappingProxyType(result)


def _refuse_invisible(key: str, value: object) -> None:
    """Refuse text holding control (Cc) or format (Cf) characters, at any depth.

    Config text is shown in chat, the panel and terminals and matched against messages: a
    zero-width space or a direction override would make a wakeword or model id that looks
    like another, and a control character could rewrite what a terminal shows.
    """
    if isinstance(value, str):
        for char in value:
            if unicodedata.category(char) in ("Cc", "Cf"):
                raise _Invalid(
                    f"{key} must not contain control or format characters"
                    f" (U+{ord(char):04X}), got {_show(value)}"
                )
    elif isinstance(value, list | tuple):
        for item in value:
            _refuse_invisible(key, item)
    elif isinstance(value, dict):
        for name, item in value.items():
            _refuse_invisible(key, name)
            _refuse_invisible(key, item)


@attrs.frozen
class _Key:
    """How one key is checked, parsed from text, and whether it may change at runtime."""

    check: Callable[[str, object], object]
    from_text: Callable[[str], object]
    runtime: bool
    multiline: bool = False  # line breaks and tabs allowed (a prompt), other controls not

    def validate(self, key: str, value: object) -> object:
        """The checked value; every source (file, environment, runtime) comes through here."""
        shown = value
        if self.multiline and isinstance(value, str):
            shown = value.replace("\n", "").replace("\t", "").replace("\r", "")
        _refuse_invisible(key, shown)
        return self.check(key, value)


def _text_raw(text: str) -> object:
    return text


def _text_stripped(text: str) -> object:
    return text.strip()


def _text_int(text: str) -> object:
    try:
        return int(text.strip())
    except ValueError:
        return text


def _text_number(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            pass
    return text


def _text_bool(text: str) -> object:
    lowered = text.strip().lower()
    if lowered in {"true", "yes", "on", "1"}:
        return True
    if lowered in {"false", "no", "off", "0"}:
        return False
    return text


def _text_list(text: str) -> object:
    return [part.strip().lower() for part in text.split(",") if part.strip()]


_ID_MENTION: Final = re.compile(r"^<(?:@&|#)([0-9]+)>$")


def _text_ids(text: str) -> object:
    """Ids as typed or pasted: raw ids, `<@&role>` or `<#channel>` mentions; `none` (or
    nothing) for an empty list."""
    if text.strip().lower() in ("", "none"):
        return []
    parts = [part for part in re.split(r"[\s,]+", text) if part]
    return [_ID_MENTION.sub(r"\1", part) for part in parts]


_seconds = _check_number("a number of seconds", SECONDS_MAX)
_usd = _check_number("an amount in USD", USD_MAX)
_KEYS: Final[Mapping[str, _Key]] = MappingProxyType(
    {
        "owner_id": _Key(_check_snowflake, _text_stripped, runtime=False),
        "wakeword": _Key(_check_wakeword, _text_raw, runtime=True),
        "continuation_seconds": _Key(_seconds, _text_number, runtime=True),
        "context_messages": _Key(
            _check_count("a whole number", CONTEXT_MESSAGES_MAX), _text_int, runtime=True
        ),
        "context_chars": _Key(
            _check_count("a whole number", CONTEXT_CHARS_MAX), _text_int, runtime=True
        ),
        "fetch_cooldown_seconds": _Key(_seconds, _text_number, runtime=True),
        "cache_max_bytes": _Key(
            _check_count("a size in bytes", BYTES_MAX), _text_int, runtime=False
        ),
        "cache_messages_per_channel": _Key(
            _check_count("a whole number", CACHE_MESSAGES_MAX), _text_int, runtime=False
        ),
        "action_log_max_bytes": _Key(
            _check_count("a size in bytes", BYTES_MAX), _text_int, runtime=False
        ),
        "poll_enabled": _Key(_check_bool, _text_bool, runtime=True),
        "poll_seconds": _Key(
            _check_number("a number of seconds", POLL_SECONDS_MAX), _text_number, runtime=True
        ),
        "catch_up_seconds": _Key(_seconds, _text_number, runtime=True),
        "response_policy.default_mode": _Key(_check_reply_mode, _text_stripped, runtime=True),
        "response_policy.sensitive_commands": _Key(_check_commands, _text_list, runtime=True),
        "response_policy.overrides": _Key(_check_overrides, _text_raw, runtime=False),
        "replies.stream": _Key(_check_bool, _text_bool, runtime=True),
        "attention.dm": _Key(_check_choice(ATTENTION_MODES), _text_stripped, runtime=True),
        "attention.group": _Key(_check_choice(ATTENTION_MODES), _text_stripped, runtime=True),
        "discriminator.model": _Key(_check_model, _text_stripped, runtime=True),
        "discriminator.timeout_seconds": _Key(
            _check_number("a number of seconds", DISCRIMINATOR_TIMEOUT_MAX),
            _text_number,
            runtime=True,
        ),
        "discriminator.history": _Key(
            _check_count("a whole number", HISTORY_MAX), _text_int, runtime=True
        ),
        "agent.system_prompt": _Key(_check_prompt, _text_raw, runtime=True, multiline=True),
        "agent.system_prompt_file": _Key(_check_prompt_file, _text_stripped, runtime=False),
        "agent.max_tokens": _Key(_check_max_tokens, _text_int, runtime=True),
        "models.triage": _Key(_check_model, _text_stripped, runtime=True),
        "models.general": _Key(_check_model, _text_stripped, runtime=True),
        "models.complex": _Key(_check_model, _text_stripped, runtime=True),
        "models.route": _Key(_check_choice(ROUTES), _text_stripped, runtime=True),
        "composting.threshold": _Key(
            _check_count("a whole number", COMPOST_THRESHOLD_MAX), _text_int, runtime=True
        ),
        "composting.pause_seconds": _Key(
            _check_number("a number of seconds", PAUSE_SECONDS_MAX), _text_number, runtime=True
        ),
        "budget.ceiling_usd": _Key(_usd, _text_number, runtime=True),
        "budget.period": _Key(_check_choice(PERIODS), _text_stripped, runtime=True),
        "budget.global_ceiling_usd": _Key(
            _check_number("an amount in USD", GLOBAL_USD_MAX), _text_number, runtime=True
        ),
        "budget.user_daily_usd": _Key(_usd, _text_number, runtime=True),
        "budget.user_requests_per_minute": _Key(
            _check_count("a whole number", REQUESTS_PER_MINUTE_MAX), _text_int, runtime=True
        ),
        "web.enabled": _Key(_check_bool, _text_bool, runtime=False),
        "web.host": _Key(_check_host, _text_stripped, runtime=False),
        "web.port": _Key(_check_port, _text_int, runtime=False),
        "web.secure_cookies": _Key(_check_bool, _text_bool, runtime=False),
        # Commands are registered on READY, so these take effect at the next start.
        "slash.enabled": _Key(_check_bool, _text_bool, runtime=False),
        "slash.guild_ids": _Key(_check_guild_ids, _text_list, runtime=False),
        # Read on every message from the settings in hand: a change applies to the next one.
        "access.allow_roles": _Key(_check_ids("role"), _text_ids, runtime=True),
        "access.allow_channels": _Key(_check_ids("channel"), _text_ids, runtime=True),
        "access.deny_channels": _Key(_check_ids("channel"), _text_ids, runtime=True),
        # Shards are taken at start: `--shards` and `--capacity` override these.
        "cluster.shards": _Key(_check_shards, _text_stripped, runtime=False),
        "cluster.capacity": _Key(_check_capacity, _text_int, runtime=False),
        "cluster.lease_seconds": _Key(_check_lease, _text_number, runtime=False),
    }
)
_SECTIONS: Final = frozenset(key.partition(".")[0] for key in _KEYS if "." in key)
_check_price = _check_number("a price in USD per million tokens", PRICE_MAX)

FILE_KEYS: Final[tuple[str, ...]] = (*_KEYS, "prices.<model>.input", "prices.<model>.output")
"""Every key `picortex.toml` accepts."""

RUNTIME_KEYS: Final[tuple[str, ...]] = tuple(key for key, spec in _KEYS.items() if spec.runtime)
"""Keys settable at runtime, plus any `response_policy.overrides.<command>`."""


def runtime_key(key: str) -> str:
    """The canonical form of a runtime-settable key; ConfigError (one sentence) otherwise."""
    key = key.strip()
    if key.lower().startswith(OVERRIDES_PREFIX):
        command = key[len(OVERRIDES_PREFIX) :].lower()
        if not _COMMAND_NAME.fullmatch(command):
            raise ConfigError(
                f"{OVERRIDES_PREFIX}<command> needs a lowercase command name, got {_show(command)}"
            )
        return OVERRIDES_PREFIX + command
    price_key = _price_key(key)
    if price_key is not None:
        return f"{PRICES_PREFIX}{price_key[0]}.{price_key[1]}"
    canonical = key.lower()
    spec = _KEYS.get(canonical)
    if spec is None:
        raise ConfigError(f"unknown config key {_show(key)}")
    if not spec.runtime:
        raise ConfigError(f"{canonical} can only be set in {CONFIG_FILE_NAME}")
    return canonical


def parse_runtime_value(key: str, text: str) -> object:
    """Parse and check a runtime value given as text (raises ConfigError: one sentence).

    For `response_policy.overrides.<command>`, the text `none` yields None: no override.
    """
    key = runtime_key(key)
    try:
        if key.startswith(OVERRIDES_PREFIX):
            if text.strip().lower() == NO_OVERRIDE:
                return None
            return _check_reply_mode(key, text.strip())
        if _price_key(key) is not None:
            return _check_price(key, _text_number(text))
        spec = _KEYS[key]
        return spec.validate(key, spec.from_text(text))
    except _Invalid as exc:
        raise ConfigError(str(exc)) from None


def key_bounds(key: str) -> Bounds:
    """What `key` accepts (any key of `picortex.toml`, a price or a reply override)."""
    key = key.strip()
    if key.lower().startswith(OVERRIDES_PREFIX):
        return Bounds("choice", choices=(*REPLY_MODES, NO_OVERRIDE))
    if _price_key(key) is not None:
        return _BOUNDS[_check_price]
    spec = _KEYS.get(key.lower())
    if spec is None:
        raise ConfigError(f"unknown config key {_show(key)}")
    return _BOUNDS.get(spec.check, Bounds("text"))


def format_value(value: object) -> str:
    """A value as text, in the form `parse_runtime_value` reads back."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        # Fixed-point, exact (`0.000001`, never `1e-06`): these are shown to people too.
        return format(Decimal(repr(value)), "f") if math.isfinite(value) else repr(value)
    if isinstance(value, str | int | Path):
        return str(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={format_value(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(format_value(v) for v in value)
    if attrs.has(type(value)):
        fields = attrs.fields(cast("type[attrs.AttrsInstance]", type(value)))
        return ", ".join(f"{f.name}={format_value(getattr(value, f.name))}" for f in fields)
    return str(value)


def runtime_values(settings: Settings) -> dict[str, str]:
    """Every key `config get|set` knows, as text: the runtime keys and each model's prices
    (what a chat command and the panel show and accept alike)."""
    values: dict[str, str] = {}
    for key in RUNTIME_KEYS:
        try:
            values[key] = format_value(settings.value_of(key))
        except Exception:  # a key without a readable value is left out, never a crash
            logger.debug("config key %s has no readable value", key)
    for model, price in settings.prices.items():
        for field in PRICE_FIELDS:
            values[f"{PRICES_PREFIX}{model}.{field}"] = format_value(getattr(price, field))
    return values


def _price_key(key: str) -> tuple[str, str] | None:
    """(model, field) of a `prices.<model>.input|output` key, or None for other keys."""
    key = key.strip()
    if not key.lower().startswith(PRICES_PREFIX):
        return None
    model, _, field = key[len(PRICES_PREFIX) :].rpartition(".")
    field = field.lower()
    if field not in PRICE_FIELDS or not model or any(_blank(c) for c in model):
        return None
    return model, field


def _blank(char: str) -> bool:
    """A space, control or format character: none belongs in a model id."""
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf")


def _set_key(settings: Settings, key: str, value: object) -> Settings:
    """A copy of settings with one dotted key changed (value already checked)."""
    price_key = _price_key(key)
    if price_key is not None:
        model, field = price_key
        # A model without a price yet takes the dearest known price for the other field.
        old = settings.price_for(model)
        prices = dict(settings.prices)
        prices[model] = attrs.evolve(old, **{field: float(cast(float, value))})
        return attrs.evolve(settings, prices=prices)
    if key.startswith(OVERRIDES_PREFIX):
        command = key[len(OVERRIDES_PREFIX) :]
        overrides = dict(settings.response_policy.overrides)
        if value is None:
            overrides.pop(command, None)
        else:
            overrides[command] = str(value)
        policy = attrs.evolve(settings.response_policy, overrides=overrides)
        return attrs.evolve(settings, response_policy=policy)
    head, _, rest = key.partition(".")
    changes: dict[str, Any] = {head: value}
    if rest:
        changes[head] = attrs.evolve(getattr(settings, head), **{rest: value})
    return attrs.evolve(settings, **changes)


# ---- loading -----------------------------------------------------------------------------


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path}: cannot be read ({reason})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def _file_values(path: Path, data: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """Checked (dotted key, value) pairs from the parsed file; unknown keys are warned about."""
    for name, raw in data.items():
        if name == "prices":
            yield "prices", _file_prices(path, raw)
        elif name in _SECTIONS:
            if not isinstance(raw, dict):
                raise _Invalid(f"{name} must be a table ([{name}]), got {_show(raw)}")
            for sub, value in raw.items():
                key = f"{name}.{sub}"
                if key in _KEYS:
                    yield key, _KEYS[key].validate(key, value)
                else:
                    logger.warning("%s: unknown key %s is ignored", path, key)
        elif name in _KEYS:
            yield name, _KEYS[name].validate(name, raw)
        else:
            logger.warning("%s: unknown key %s is ignored", path, name)


def _file_prices(path: Path, raw: object) -> Mapping[str, Price]:
    if not isinstance(raw, dict):
        raise _Invalid(f'prices must be a table of [prices."<model>"] tables, got {_show(raw)}')
    prices = dict(BUILTIN_PRICES)
    for model, entry in raw.items():
        key = f"prices.{model}"
        _refuse_invisible("prices", model)
        if not isinstance(entry, dict):
            raise _Invalid(f"{key} must be a table with input and output, got {_show(entry)}")
        known = prices.get(model)
        values: dict[str, float] = {}
        for field in ("input", "output"):
            if field in entry:
                values[field] = _check_price(f"{key}.{field}", entry[field])
            elif known is not None:
                values[field] = getattr(known, field)
            else:
                raise _Invalid(f"{key} needs both input and output prices")
        for extra in entry.keys() - {"input", "output"}:
            logger.warning("%s: unknown key %s.%s is ignored", path, key, extra)
        prices[model] = Price(values["input"], values["output"])
    return prices


def _with_prompt_file(settings: Settings, config_path: Path) -> Settings:
    """Settings with `[agent] system_prompt_file` read into `system_prompt`.

    Raises:
        ConfigError: both are set, or the file cannot be read or is too long.
    """
    agent = settings.agent
    if not agent.system_prompt_file:
        return settings
    if agent.system_prompt:
        raise ConfigError(
            f"{config_path}: set agent.system_prompt or agent.system_prompt_file, not both"
        )
    path = settings.home / agent.system_prompt_file
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{path} (agent.system_prompt_file): cannot be read ({reason})") from None
    try:
        text = str(_KEYS["agent.system_prompt"].validate("agent.system_prompt_file", text))
    except _Invalid as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return attrs.evolve(settings, agent=attrs.evolve(agent, system_prompt=text))


def _env(env: Mapping[str, str], name: str) -> str | None:
    """An environment variable, with an empty value counting as unset."""
    value = env.get(name, "").strip()
    return value or None


def load_settings(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None
) -> Settings:
    """Settings from `PICORTEX_HOME/picortex.toml`, the environment, then runtime overrides.

    Args:
        env: the environment (defaults to `os.environ`).
        overrides: runtime config from the database (dotted keys, text values).

    Raises:
        ConfigError: one sentence naming the bad key and the file or variable.
    """
    env = os.environ if env is None else env
    home = Path(_env(env, "PICORTEX_HOME") or DEFAULT_HOME).expanduser()
    path = home / CONFIG_FILE_NAME
    settings = Settings(home=home)
    try:
        for key, value in _file_values(path, _read_toml(path)):
            settings = _set_key(settings, key, value)
    except _Invalid as exc:
        raise ConfigError(f"{path}: {exc}") from None
    settings = _with_prompt_file(settings, path)

    owner = _env(env, "PICORTEX_OWNER_ID")
    if owner is not None:
        try:
            settings = attrs.evolve(settings, owner_id=_check_snowflake("PICORTEX_OWNER_ID", owner))
        except _Invalid as exc:
            raise ConfigError(str(exc)) from None
    api_base = (_env(env, "DISCORD_API_BASE") or DEFAULT_API_BASE).rstrip("/")
    if not api_base.startswith(("http://", "https://")):
        raise ConfigError(f"DISCORD_API_BASE must be an http(s) URL, got {_show(api_base)}")
    action_log = _env(env, "PICORTEX_ACTION_LOG")
    cache_dir = _env(env, "PICORTEX_CACHE_DIR")
    settings = attrs.evolve(
        settings,
        discord_token=_env(env, "DISCORD_BOT_TOKEN"),
        api_base=api_base,
        anthropic_api_key=_env(env, "ANTHROPIC_API_KEY"),
        anthropic_base_url=_env(env, "ANTHROPIC_BASE_URL"),
        database_url=_env(env, "PICORTEX_DATABASE_URL"),
        action_log_path=Path(action_log).expanduser() if action_log else home / "actions.jsonl",
        cache_dir=Path(cache_dir).expanduser() if cache_dir else home / "cache",
        fault_inject=env.get("PICORTEX_FAULT_INJECT", "").strip(),
    )
    # From here on these exact values are redacted wherever they would be written.
    remember_secrets(
        settings.discord_token, settings.anthropic_api_key, *url_secrets(settings.database_url)
    )
    return settings.with_runtime(overrides) if overrides else settings


def load_settings_for_reading(
    env: Mapping[str, str] | None = None,
) -> tuple[Settings, str | None]:
    """Settings for the commands that only read (`log`, `errors`, `status`).

    A broken `picortex.toml` must not keep anyone from reading the log that says why: its
    sentence is returned beside settings built from the environment alone.

    Returns:
        The settings, and the configuration error's sentence (None when the file is fine).
    """
    env = os.environ if env is None else env
    try:
        return load_settings(env), None
    except ConfigError as exc:
        problem = str(exc)
    home = Path(_env(env, "PICORTEX_HOME") or DEFAULT_HOME).expanduser()
    action_log = _env(env, "PICORTEX_ACTION_LOG")
    cache_dir = _env(env, "PICORTEX_CACHE_DIR")
    settings = attrs.evolve(
        Settings(home=home),
        action_log_path=Path(action_log).expanduser() if action_log else home / "actions.jsonl",
        cache_dir=Path(cache_dir).expanduser() if cache_dir else home / "cache",
        database_url=_env(env, "PICORTEX_DATABASE_URL"),
    )
    remember_secrets(*url_secrets(settings.database_url))
    return settings, problem
