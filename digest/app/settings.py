"""Settings from the environment (prefix ``DIGEST_``), read once at start and passed down.

Secrets have ``_FILE`` variants (as in healthchecks and the Docker convention) so that a Kubernetes Secret can be
mounted as a file instead of being placed in the environment; a secret is kept as `SecretStr` and never printed.
A bad value fails at start with `ConfigError`, whose message is one line naming the variable.
"""

from __future__ import annotations

import enum
import os
import re
from datetime import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from digest.backends.http import DEFAULT_MAX_RESPONSE_MIB, MIB, Endpoint, url_userinfo
from digest.backends.scope import Scope, parse_matchers, split_metrics_url
from digest.output.links import LinkMaker

ENV_PREFIX = "DIGEST_"


class ConfigError(Exception):
    """A configuration problem, described in one line that names the setting."""


def _breaks_a_request(text: str) -> bool:
    """Whether ``text`` holds a space or a control character, which no URL or header value can carry as is."""
    return any(character.isspace() or not character.isprintable() for character in text)


def _check_url(value: str) -> str:
    """``value`` without a trailing slash if httpx can send to it; the reasons never echo it (it may hold a secret)."""
    try:
        parts = urlsplit(value)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed IPv6 bracket
        usable = False
    if not usable:
        raise ValueError("must be an http:// or https:// URL")
    if _breaks_a_request(value):
        raise ValueError("must not contain spaces or control characters")
    try:
        port = parts.port
    except ValueError:  # urllib's "Port out of range 0-65535" / "could not be cast to integer"
        port = 0
    if port == 0:
        raise ValueError("must have a port between 1 and 65535 (or none)")
    try:
        # `.host` decodes the IDNA form as httpx does for every request: "xn--zz" parses but fails there.
        httpx.URL(value).host  # noqa: B018  # evaluated for the error it raises, not for its value
    except httpx.InvalidURL:
        raise ValueError("is not a URL httpx can send requests to") from None
    except ValueError:  # idna.IDNAError (a UnicodeError): a malformed internationalised host name
        raise ValueError("has a host name that is not valid IDNA (e.g. a broken xn-- label)") from None
    return value.rstrip("/")


# An HTTP header name (RFC 7230's token) and value (visible ASCII and spaces): anything else fails at the first
# request deep inside httpx, as a traceback per query, instead of once at start.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")
# Headers that httpx and HTTP framing set themselves: a configured one breaks the request (a wrong Content-Length
# is a protocol error per query).
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection", "content-type"})


def _check_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` if each can be sent as is; the reasons name a header but never echo a value."""
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError("a header name is not an HTTP token (ASCII letters, digits and !#$%&'*+-.^_`|~ only)")
        if name.lower() in _FRAMING_HEADERS:
            raise ValueError(f"header {name!r} is set by the HTTP client itself and cannot be configured")
        if not _HEADER_VALUE.fullmatch(value):
            raise ValueError(f"the value of header {name!r} must be printable ASCII without control characters")
    return headers


# A Bot API token as BotFather issues it: the bot's numeric id, a colon, and a URL-safe secret.
_TELEGRAM_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")


# VictoriaMetrics cluster's tenant in a vmselect path: accountID, or accountID:projectID (32-bit unsigned each).
_VM_TENANT = re.compile(r"[0-9]{1,10}(:[0-9]{1,10})?")


def _no_query(url: str, instead: str) -> str:
    """``url`` if it has no query string: a base URL's query reaches no request, and is refused rather than lost."""
    if urlsplit(url).query:
        raise ValueError(f"must not carry a query string (it would reach no request); use {instead}")
    return url


WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class RecordedCounts(enum.StrEnum):
    """Whether the log checks read recorded counts (DIGEST_RECORDED_COUNTS)."""

    AUTO = "auto"
    OFF = "off"


class Settings(BaseSettings):
    """Everything the digest reads from its environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    vm_url: str = "http://127.0.0.1:8428"
    vl_url: str = "http://127.0.0.1:9428"
    timezone: str = "UTC"
    cluster: str = "cluster"

    vm_bearer_token: SecretStr | None = None
    vm_bearer_token_file: Path | None = None
    vm_username: str | None = None
    vm_password: SecretStr | None = None
    vm_password_file: Path | None = None
    vm_headers: dict[str, str] = Field(default_factory=dict)
    # A VictoriaMetrics cluster's tenant ("0", "12:34"): the URL is vmselect's root and /select/<tenant>/prometheus
    # is added to it. Leave unset for a single-node VictoriaMetrics, Prometheus, or a URL that has the prefix already.
    vm_tenant: str | None = None
    # The cluster on a shared store, as label matchers added to every PromQL selector: cluster="prod".
    metrics_selector: str = ""
    # The same for the logs: a stream filter on VictoriaLogs, stream-selector matchers on Loki.
    logs_selector: str = ""
    # Read the log checks' counts from recording rules' series in the metrics store where they cover the window
    # (`digest rules` writes the rules), scanning the logs for the rest; "off" always scans the logs.
    recorded_counts: RecordedCounts = RecordedCounts.AUTO
    # Where the recording rules write, when not into DIGEST_VM_URL (same credentials and cluster selector).
    records_url: str | None = None

    vl_bearer_token: SecretStr | None = None
    vl_bearer_token_file: Path | None = None
    vl_username: str | None = None
    vl_password: SecretStr | None = None
    vl_password_file: Path | None = None
    vl_headers: dict[str, str] = Field(default_factory=dict)
    vl_account_id: Annotated[int, Field(ge=0)] | None = None
    vl_project_id: Annotated[int, Field(ge=0)] | None = None

    # Loki instead of VictoriaLogs: setting DIGEST_LOKI_URL selects it (DIGEST_VL_URL must then be left unset).
    loki_url: str | None = None
    loki_bearer_token: SecretStr | None = None
    loki_bearer_token_file: Path | None = None
    loki_username: str | None = None
    loki_password: SecretStr | None = None
    loki_password_file: Path | None = None
    loki_headers: dict[str, str] = Field(default_factory=dict)
    loki_tenant: str | None = None  # sent as X-Scope-OrgID (multi-tenant Loki)

    # The UIs a reader opens from the HTML digest's links (digest.output.links), as a browser reaches them.
    grafana_url: str | None = None
    grafana_metrics_datasource: str | None = None  # the datasource's UID
    grafana_logs_datasource: str | None = None
    grafana_org_id: Annotated[int, Field(ge=1)] = 1
    vmui_url: str | None = None
    prometheus_ui_url: str | None = None
    victorialogs_ui_url: str | None = None

    query_timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    max_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    # The most one backend answer may weigh (decompressed); past it the query fails instead of the pod's memory.
    max_response_mib: Annotated[int, Field(gt=0)] = DEFAULT_MAX_RESPONSE_MIB
    policy_file: Path | None = None

    # Telegram: only `digest serve` and `digest run --post` need these.
    telegram_token: SecretStr | None = None
    telegram_token_file: Path | None = None
    telegram_api_url: str = "https://api.telegram.org"
    telegram_chat_ids: Annotated[tuple[int, ...], NoDecode] = ()
    # A forum supergroup's topic the scheduled digest goes to, per chat: written in TELEGRAM_CHAT_IDS as chat:topic.
    telegram_chat_topics: Annotated[dict[int, int], NoDecode] = Field(default_factory=dict, exclude=True)
    telegram_admin_ids: Annotated[tuple[int, ...], NoDecode] = ()
    telegram_webhook_url: str | None = None
    telegram_webhook_listen: str = "0.0.0.0"  # noqa: S104  # a webhook must be reachable from outside the pod
    telegram_webhook_port: Annotated[int, Field(ge=1, le=65535)] = 8443
    telegram_webhook_secret: SecretStr | None = None
    # Where the digests go: a comma-separated list of channels (CHANNEL_NAMES), each configured by its own group.
    channels: Annotated[tuple[str, ...], NoDecode] = ("telegram",)
    # The signed webhook: recipients as name=URL pairs (the URLs are secrets), the HMAC key, the wait per answer.
    webhook_urls: SecretStr | None = None
    webhook_urls_file: Path | None = None
    webhook_secret: SecretStr | None = None
    webhook_secret_file: Path | None = None
    webhook_timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 10.0
    # Slack: a bot token with the channels it posts to, or incoming webhooks as name=URL pairs (text only).
    slack_token: SecretStr | None = None
    slack_token_file: Path | None = None
    slack_channel_ids: Annotated[tuple[str, ...], NoDecode] = ()
    slack_webhook_urls: SecretStr | None = None
    slack_webhook_urls_file: Path | None = None
    slack_api_url: str = "https://slack.com/api"
    slack_chart: bool = True
    # Mattermost: a bot account's token on a server with the channels it posts to, or incoming webhooks (text only).
    mattermost_url: str | None = None
    mattermost_token: SecretStr | None = None
    mattermost_token_file: Path | None = None
    mattermost_channel_ids: Annotated[tuple[str, ...], NoDecode] = ()
    mattermost_webhook_urls: SecretStr | None = None
    mattermost_webhook_urls_file: Path | None = None
    mattermost_chart: bool = True
    post_at: str = "12:00"
    # The week at a glance, posted on this day at POST_AT for the ISO week before; "off" for none.
    weekly_post: str = "monday"
    late_grace_hours: Annotated[float, Field(ge=0, le=24)] = 6.0
    state_path: Path = Path("digest-state.sqlite")
    # /digest per chat: up to COMMAND_BURST digests in any COMMAND_BURST_WINDOW_SECONDS; more are queued, not refused.
    command_burst: Annotated[int, Field(ge=1, le=100)] = 3
    command_burst_window_seconds: Annotated[float, Field(ge=0, le=3600)] = 60.0
    digest_deadline_seconds: Annotated[float, Field(gt=0, le=600)] = 90.0
    health_port: Annotated[int, Field(ge=0, le=65535)] = 8080
    # A /digest still computing after this long gets a short "Computing …" reply (removed when the digest comes).
    telegram_computing_notice_seconds: Annotated[float, Field(ge=0, le=600)] = 3.0
    # /healthz fails once no poll of Telegram succeeded for this long (at once on 401 and 409).
    telegram_poll_stale_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    telegram_chart: bool = True
    # Pinged (GET) after each successful daily post: a healthchecks.io-style dead man's switch outside the cluster.
    heartbeat_url: SecretStr | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment is the only source (and the overrides tests pass): no dotenv file, no secrets directory.

        The secrets' files are the ``_FILE`` variables, read by `_secret_files`. pydantic-settings would otherwise
        ask its dotenv and secrets-directory sources for every field at every start, ~1.5 ms of a `digest run`,
        for files this configuration never names.
        """
        return (init_settings, env_settings)

    @model_validator(mode="before")
    @classmethod
    def _topics(cls, given: object) -> object:
        """``-1001234567890:77`` in TELEGRAM_CHAT_IDS: the chat, and the topic of that forum its posts go to."""
        if not isinstance(given, dict):
            return given
        if isinstance(given.get("telegram_chat_topics"), str):
            raise ValueError(
                f"{ENV_PREFIX}TELEGRAM_CHAT_TOPICS is not a setting: write a forum topic in"
                f" {ENV_PREFIX}TELEGRAM_CHAT_IDS as chat:topic, e.g. -1001234567890:77"
            )
        raw = given.get("telegram_chat_ids")
        if not isinstance(raw, str) or ":" not in raw:
            return given
        chats: list[str] = []
        topics: dict[int, int] = {}
        for part in (part.strip() for part in raw.replace(";", ",").split(",")):
            chat, colon, topic = (piece.strip() for piece in part.partition(":"))
            if colon and chat.removeprefix("-").isdigit() and topic.isdigit():
                topics[int(chat)] = int(topic)
                chats.append(chat)
            else:
                chats.append(part)  # not chat:topic: the chat ids' own check names the setting and the form
        return {**given, "telegram_chat_ids": ",".join(chats), "telegram_chat_topics": topics}

    @field_validator("telegram_chat_ids", "telegram_admin_ids", mode="before")
    @classmethod
    def _ids(cls, value: object) -> object:
        if isinstance(value, str):
            parts = [part.strip() for part in value.replace(";", ",").split(",") if part.strip()]
            try:
                return tuple(int(part) for part in parts)
            except ValueError:
                raise ValueError(
                    "must be comma-separated integer chat ids, e.g. -1001234567890,42 (a forum topic: -100123:77)"
                ) from None
        return value

    @field_validator("channels", mode="before")
    @classmethod
    def _channels(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip().lower() for part in value.replace(";", ",").split(",") if part.strip())
        if isinstance(value, tuple | list):
            unknown = [one for one in value if one not in CHANNEL_NAMES]
            if unknown:
                raise ValueError(f"unknown channel {unknown[0]!r}: the channels are {', '.join(CHANNEL_NAMES)}")
            if not value:
                raise ValueError(f"name at least one channel ({', '.join(CHANNEL_NAMES)})")
            if len(set(value)) != len(value):
                raise ValueError("a channel is named twice")
        return value

    @field_validator("slack_channel_ids", mode="before")
    @classmethod
    def _slack_channels(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.replace(";", ",").split(",") if part.strip())
        if isinstance(value, tuple | list):
            for one in value:
                if not _SLACK_CHANNEL.fullmatch(str(one)):
                    raise ValueError(
                        f"{str(one)[:40]!r} is not a Slack channel: its id (C0123ABCD) or #name, comma-separated"
                    )
        return value

    @field_validator("mattermost_channel_ids", mode="before")
    @classmethod
    def _mattermost_channels(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.replace(";", ",").split(",") if part.strip())
        if isinstance(value, tuple | list):
            for one in value:
                if not _MATTERMOST_ID.fullmatch(str(one)):
                    raise ValueError(
                        f"{str(one)[:40]!r} is not a Mattermost channel id (26 lower-case letters and digits, from"
                        " the channel's View Info), comma-separated"
                    )
        return value

    @field_validator("mattermost_url")
    @classmethod
    def _mattermost_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("mattermost_webhook_urls")
    @classmethod
    def _mattermost_webhook_urls(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            webhook_endpoints(value.get_secret_value())
        return value

    @field_validator("slack_webhook_urls")
    @classmethod
    def _slack_webhook_urls(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            webhook_endpoints(value.get_secret_value())
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _slack_api_url(cls, value: str) -> str:
        return _check_url(value)

    @field_validator("webhook_urls")
    @classmethod
    def _webhook_urls(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            webhook_endpoints(value.get_secret_value())
        return value

    @field_validator("heartbeat_url")
    @classmethod
    def _heartbeat(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _check_url(value.get_secret_value())
        return value

    @field_validator("telegram_api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return _check_url(value)

    @field_validator("telegram_webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("vm_headers", "vl_headers", "loki_headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_headers(value)

    @field_validator("weekly_post")
    @classmethod
    def _weekly_post(cls, value: str) -> str:
        day = value.strip().lower()
        if day != "off" and day not in WEEKDAYS:
            raise ValueError("must be a day of the week (monday … sunday) or off")
        return day

    @property
    def weekly_post_day(self) -> int | None:
        """The weekday of the weekly post (Monday is 0), or None when it is off."""
        return None if self.weekly_post == "off" else WEEKDAYS.index(self.weekly_post)

    @field_validator("post_at")
    @classmethod
    def _post_at(cls, value: str) -> str:
        try:
            hours, minutes = (int(part) for part in value.strip().split(":"))
        except ValueError:
            raise ValueError("must be HH:MM, e.g. 12:00") from None
        if not (0 <= hours < 24 and 0 <= minutes < 60):
            raise ValueError("must be HH:MM between 00:00 and 23:59")
        return f"{hours:02d}:{minutes:02d}"

    @field_validator("vm_url")
    @classmethod
    def _vm_url(cls, value: str) -> str:
        checked = _check_url(value)
        split_metrics_url(checked)  # raises, naming the query parameter it cannot honour
        return checked

    @field_validator("records_url")
    @classmethod
    def _records_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("vl_url")
    @classmethod
    def _vl_url(cls, value: str) -> str:
        return _no_query(_check_url(value), "DIGEST_VL_ACCOUNT_ID/PROJECT_ID and DIGEST_LOGS_SELECTOR")

    @field_validator("loki_url")
    @classmethod
    def _loki_url(cls, value: str | None) -> str | None:
        return None if value is None else _no_query(_check_url(value), "DIGEST_LOKI_TENANT and DIGEST_LOGS_SELECTOR")

    @field_validator("grafana_url", "vmui_url", "prometheus_ui_url", "victorialogs_ui_url")
    @classmethod
    def _ui_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("grafana_metrics_datasource", "grafana_logs_datasource")
    @classmethod
    def _datasource(cls, value: str | None) -> str | None:
        if value is not None and (not value or _breaks_a_request(value)):
            raise ValueError("must be a Grafana datasource UID (one word, no spaces)")
        return value

    def links(self) -> LinkMaker:
        """The HTML digest's links to the UIs configured (none when none is)."""
        return LinkMaker(
            grafana_url=self.grafana_url,
            grafana_metrics_datasource=self.grafana_metrics_datasource,
            grafana_logs_datasource=self.grafana_logs_datasource,
            grafana_org_id=self.grafana_org_id,
            vmui_url=self.vmui_url,
            prometheus_ui_url=self.prometheus_ui_url,
            victorialogs_ui_url=self.victorialogs_ui_url,
            metrics_scope=self.metrics_scope,
        )

    @field_validator("vm_tenant")
    @classmethod
    def _vm_tenant(cls, value: str | None) -> str | None:
        if value is not None and not _VM_TENANT.fullmatch(value.strip()):
            raise ValueError(
                "must be a VictoriaMetrics tenant: an account id, or accountID:projectID (e.g. 0 or 12:34)"
            )
        return None if value is None else value.strip()

    @field_validator("metrics_selector", "logs_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        parse_matchers(value)  # a ScopeError is a ValueError: its reason names what is wrong
        return value.strip()

    @property
    def metrics_scope(self) -> Scope:
        """The matchers added to every PromQL selector: the URL's extra_label/extra_filters, then the selector."""
        return split_metrics_url(self.vm_url)[1] + parse_matchers(self.metrics_selector)

    @property
    def logs_scope(self) -> Scope:
        """The stream matchers added to every log query."""
        return parse_matchers(self.logs_selector)

    def metrics_base_url(self) -> str:
        """The metrics URL requests go to: without its scoping query string, with the tenant's vmselect prefix."""
        base = split_metrics_url(self.vm_url)[0].rstrip("/")
        if self.vm_tenant is None:
            return base
        return f"{base}/select/{self.vm_tenant}/prometheus"

    @field_validator("loki_tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        if value is not None and (not value or _breaks_a_request(value) or not value.isascii()):
            raise ValueError("must be one line of printable ASCII without spaces (Loki's X-Scope-OrgID)")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA time zone {value!r}") from None
        return value

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not value.strip() or len(value) > 64:
            raise ValueError("must be 1 to 64 characters")
        return value.strip()

    @model_validator(mode="after")
    def _secret_files(self) -> Settings:
        if self.vm_tenant is not None and "/select/" in urlsplit(self.vm_url).path:
            raise ValueError(
                f"{ENV_PREFIX}VM_TENANT: the URL has a /select/ path already; set the tenant in one of the two"
            )
        if self.loki_url is not None and "vl_url" in self.model_fields_set:
            raise ValueError(
                f"{ENV_PREFIX}LOKI_URL and {ENV_PREFIX}VL_URL are both set: set the one log backend the digest reads"
            )
        for name in _SECRET_FILES:
            path: Path | None = getattr(self, f"{name}_file")
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"{ENV_PREFIX}{name.upper()} and {ENV_PREFIX}{name.upper()}_FILE are both set")
            try:
                secret = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(
                    f"{ENV_PREFIX}{name.upper()}_FILE: cannot read {path} ({exc.strerror or type(exc).__name__})"
                ) from None
            except UnicodeDecodeError:
                raise ValueError(f"{ENV_PREFIX}{name.upper()}_FILE: cannot read {path} (not UTF-8 text)") from None
            # The model is frozen; setting the resolved secret once here is the only mutation.
            object.__setattr__(self, name, SecretStr(secret))
            if name in ("webhook_urls", "slack_webhook_urls", "mattermost_webhook_urls"):
                try:
                    webhook_endpoints(secret)
                except ValueError as exc:
                    raise ValueError(f"{ENV_PREFIX}{name.upper()}_FILE: {exc}") from None
        # Tokens travel in a URL path or a header, where a newline or a space breaks the request deep inside the
        # HTTP stack; the reason never shows the token, nor where it differs.
        tokens = ("vm_bearer_token", "vl_bearer_token", "loki_bearer_token", "telegram_token", "slack_token")
        for name in (*tokens, "mattermost_token"):
            held: SecretStr | None = getattr(self, name)
            token = held.get_secret_value() if held is not None else ""
            variable = f"{ENV_PREFIX}{name.upper()}{'_FILE' if getattr(self, f'{name}_file') is not None else ''}"
            if name == "telegram_token" and token and not _TELEGRAM_TOKEN.fullmatch(token):
                raise ValueError(
                    f"{variable}: not a bot token (BotFather's form is digits, a colon, then letters, digits, _ or -)"
                )
            if _breaks_a_request(token):
                raise ValueError(f"{variable}: must be one line without spaces or control characters")
            if not token.isascii():
                # A bearer token is a header value, which httpx encodes as ASCII: anything else fails per request.
                raise ValueError(f"{variable}: must be ASCII (a header value cannot carry other characters)")
        for prefix in ("vm", "vl", "loki"):
            if getattr(self, f"{prefix}_password") is not None and not getattr(self, f"{prefix}_username"):
                raise ValueError(
                    f"{ENV_PREFIX}{prefix.upper()}_PASSWORD is set without {ENV_PREFIX}{prefix.upper()}_USERNAME"
                )
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def post_time(self) -> time:
        """The daily post time, in DIGEST_TIMEZONE."""
        hours, minutes = (int(part) for part in self.post_at.split(":"))
        return time(hours, minutes, tzinfo=self.zone)

    def secrets(self) -> list[str]:
        """Every secret value, for the log redactor (which also masks each one percent-encoded).

        Besides the secret settings: credentials written into a URL, the values of the extra headers (often an API
        key), and the heartbeat URL's path, which is its secret part and survives httpx's normalising of the URL.
        """
        values = [
            self.vm_bearer_token,
            self.vm_password,
            self.vl_bearer_token,
            self.vl_password,
            self.loki_bearer_token,
            self.loki_password,
            self.telegram_token,
            self.telegram_webhook_secret,
            self.heartbeat_url,
            self.webhook_urls,
            self.webhook_secret,
            self.slack_token,
            self.slack_webhook_urls,
            self.mattermost_token,
            self.mattermost_webhook_urls,
        ]
        secrets = [value.get_secret_value() for value in values if value is not None]
        for url in (self.vm_url, self.vl_url, self.loki_url, self.telegram_api_url, self.telegram_webhook_url):
            if url:
                secrets.extend(url_secrets(url))
        if self.heartbeat_url is not None:
            heartbeat = self.heartbeat_url.get_secret_value()
            secrets.extend(url_secrets(heartbeat))
            path = urlsplit(heartbeat)._replace(scheme="", netloc="").geturl()
            if len(path) > 1:
                secrets.append(path)
            secrets.extend(_printed_forms(heartbeat))
        headers = {**self.vm_headers, **self.vl_headers, **self.loki_headers}
        secrets.extend(value for value in headers.values() if value)
        # A webhook URL is its receiver's credential: the URL, its path and query as written and as httpx logs them.
        hooks = (self.webhook_endpoints(), self.slack_webhook_endpoints(), self.mattermost_webhook_endpoints())
        for url in (url for endpoints in hooks for url in endpoints.values()):
            secrets.append(url)
            secrets.extend(url_secrets(url))
            path = urlsplit(url)._replace(scheme="", netloc="").geturl()
            if len(path) > 1:
                secrets.append(path)
            secrets.extend(_printed_forms(url))
        return secrets

    def webhook_endpoints(self) -> dict[str, str]:
        """The webhook recipients: name → URL (empty when DIGEST_WEBHOOK_URLS is not set)."""
        return {} if self.webhook_urls is None else webhook_endpoints(self.webhook_urls.get_secret_value())

    def slack_webhook_endpoints(self) -> dict[str, str]:
        """Slack's incoming webhooks: name → URL (empty when DIGEST_SLACK_WEBHOOK_URLS is not set)."""
        return {} if self.slack_webhook_urls is None else webhook_endpoints(self.slack_webhook_urls.get_secret_value())

    def require_slack(self) -> str | None:
        """The Slack bot token (None: incoming webhooks); `ConfigError` naming what is missing or set twice."""
        token = self.slack_token.get_secret_value() if self.slack_token is not None else ""
        hooks = self.slack_webhook_endpoints()
        if token and hooks:
            raise ConfigError(
                f"{ENV_PREFIX}SLACK_TOKEN and {ENV_PREFIX}SLACK_WEBHOOK_URLS are both set: post with the bot token"
                " (and the chart) or with incoming webhooks (text only), not both"
            )
        if hooks:
            return None
        if not token:
            raise ConfigError(
                f"{ENV_PREFIX}SLACK_TOKEN: not set (a bot token, xoxb-…; or {ENV_PREFIX}SLACK_TOKEN_FILE;"
                f" or {ENV_PREFIX}SLACK_WEBHOOK_URLS for incoming webhooks)"
            )
        if not self.slack_channel_ids:
            raise ConfigError(f"{ENV_PREFIX}SLACK_CHANNEL_IDS: not set (the channels to post to, e.g. C0123ABCD)")
        return token

    def mattermost_webhook_endpoints(self) -> dict[str, str]:
        """Mattermost's incoming webhooks: name → URL (empty when DIGEST_MATTERMOST_WEBHOOK_URLS is not set)."""
        given = self.mattermost_webhook_urls
        return {} if given is None else webhook_endpoints(given.get_secret_value())

    def require_mattermost(self) -> tuple[str, str] | None:
        """The server URL and bot token (None: incoming webhooks); `ConfigError` naming what is missing or doubled."""
        token = self.mattermost_token.get_secret_value() if self.mattermost_token is not None else ""
        hooks = self.mattermost_webhook_endpoints()
        if token and hooks:
            raise ConfigError(
                f"{ENV_PREFIX}MATTERMOST_TOKEN and {ENV_PREFIX}MATTERMOST_WEBHOOK_URLS are both set: post with the"
                " bot's token (and the chart) or with incoming webhooks (text only), not both"
            )
        if hooks:
            return None
        if not token:
            raise ConfigError(
                f"{ENV_PREFIX}MATTERMOST_TOKEN: not set (a bot account's access token; or"
                f" {ENV_PREFIX}MATTERMOST_TOKEN_FILE; or {ENV_PREFIX}MATTERMOST_WEBHOOK_URLS for incoming webhooks)"
            )
        if self.mattermost_url is None:
            raise ConfigError(f"{ENV_PREFIX}MATTERMOST_URL: not set (the server, e.g. https://chat.example.org)")
        if not self.mattermost_channel_ids:
            raise ConfigError(f"{ENV_PREFIX}MATTERMOST_CHANNEL_IDS: not set (the channels' ids to post to)")
        return self.mattermost_url, token

    def require_webhook(self) -> tuple[dict[str, str], bytes]:
        """The webhook's URLs and signing key; `ConfigError` naming the variable when one is missing."""
        endpoints = self.webhook_endpoints()
        if not endpoints:
            raise ConfigError(
                f"{ENV_PREFIX}WEBHOOK_URLS: not set (name=URL pairs, e.g. ops=https://hooks.example/digest; "
                f"or {ENV_PREFIX}WEBHOOK_URLS_FILE)"
            )
        if self.webhook_secret is None or not self.webhook_secret.get_secret_value():
            raise ConfigError(
                f"{ENV_PREFIX}WEBHOOK_SECRET: not set (every post is signed with it;"
                f" or {ENV_PREFIX}WEBHOOK_SECRET_FILE)"
            )
        return endpoints, self.webhook_secret.get_secret_value().encode()

    def require_telegram(self) -> str:
        """The bot token; `ConfigError` naming the variables when it or the chats are missing."""
        if self.telegram_token is None or not self.telegram_token.get_secret_value():
            raise ConfigError(f"{ENV_PREFIX}TELEGRAM_TOKEN: not set (or set {ENV_PREFIX}TELEGRAM_TOKEN_FILE)")
        if not self.telegram_chat_ids:
            raise ConfigError(f"{ENV_PREFIX}TELEGRAM_CHAT_IDS: not set (comma-separated chat ids to post to)")
        return self.telegram_token.get_secret_value()

    def vm_endpoint(self) -> Endpoint:
        """How to reach VictoriaMetrics (or vmselect / Prometheus)."""
        return self._endpoint(
            "VictoriaMetrics",
            "vm_url",
            self.metrics_base_url(),
            self.vm_bearer_token,
            self.vm_username,
            self.vm_password,
            self.vm_headers,
            {},
        )

    def records_endpoint(self) -> Endpoint | None:
        """Where the recorded log counts are read, when not from the metrics store (None: from it)."""
        if self.records_url is None:
            return None
        return self._endpoint(
            "recorded counts",
            "records_url",
            self.records_url,
            self.vm_bearer_token,
            self.vm_username,
            self.vm_password,
            self.vm_headers,
            {},
        )

    @property
    def log_backend(self) -> LogBackend:
        """Which log backend the digest reads: Loki when DIGEST_LOKI_URL is set, else VictoriaLogs."""
        return LogBackend.LOKI if self.loki_url is not None else LogBackend.VICTORIALOGS

    def logs_endpoint(self) -> Endpoint:
        """How to reach the log backend the settings select."""
        if self.loki_url is None:
            return self.vl_endpoint()
        return self._endpoint(
            "Loki",
            "loki_url",
            self.loki_url,
            self.loki_bearer_token,
            self.loki_username,
            self.loki_password,
            self.loki_headers,
            {"X-Scope-OrgID": self.loki_tenant} if self.loki_tenant else {},
        )

    def vl_endpoint(self) -> Endpoint:
        """How to reach VictoriaLogs, with its tenant headers."""
        tenant: dict[str, str] = {}
        if self.vl_account_id is not None:
            tenant["AccountID"] = str(self.vl_account_id)
        if self.vl_project_id is not None:
            tenant["ProjectID"] = str(self.vl_project_id)
        return self._endpoint(
            "VictoriaLogs",
            "vl_url",
            self.vl_url,
            self.vl_bearer_token,
            self.vl_username,
            self.vl_password,
            self.vl_headers,
            tenant,
        )

    def _endpoint(
        self,
        name: str,
        setting: str,
        url: str,
        token: SecretStr | None,
        username: str | None,
        password: SecretStr | None,
        headers: dict[str, str],
        tenant: dict[str, str],
    ) -> Endpoint:
        merged = {**headers, **tenant}
        if token is not None:
            merged["Authorization"] = f"Bearer {token.get_secret_value()}"
        basic = (username, password.get_secret_value() if password else "") if username else None
        return Endpoint(
            name=name,
            url=url,
            headers=merged,
            basic_auth=basic,
            timeout_seconds=self.query_timeout,
            max_concurrency=self.max_concurrency,
            max_response_bytes=self.max_response_mib * MIB,
            setting=f"{ENV_PREFIX}{setting.upper()}",
        )


class LogBackend(enum.StrEnum):
    """The log backends the digest can read."""

    VICTORIALOGS = "victorialogs"
    LOKI = "loki"


# The secrets that may be given in a file instead (DIGEST_X_FILE), read once at start.
_SECRET_FILES = (
    "vm_bearer_token",
    "vm_password",
    "vl_bearer_token",
    "vl_password",
    "loki_bearer_token",
    "loki_password",
    "telegram_token",
    "webhook_urls",
    "webhook_secret",
    "slack_token",
    "slack_webhook_urls",
    "mattermost_token",
    "mattermost_webhook_urls",
)

# The channels DIGEST_CHANNELS may name (digest.app.channels builds each; a test holds the two lists equal).
CHANNEL_NAMES = ("telegram", "slack", "mattermost", "webhook")
_MATTERMOST_ID = re.compile(r"[a-z0-9]{26}")
# A Slack conversation as chat.postMessage takes it: an id (C…, G…, D…) or a #name.
_SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]{6,}|#[a-z0-9][a-z0-9_.-]{0,79}")
_RECIPIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def webhook_endpoints(value: str) -> dict[str, str]:
    """``name=URL`` pairs (comma- or newline-separated) as name → URL; one bare URL is named "webhook".

    `ValueError` with a reason that never echoes a URL (it is a secret).
    """
    pairs = [part.strip() for part in value.replace("\n", ",").split(",") if part.strip()]
    if len(pairs) == 1 and "=" not in pairs[0].split("://", 1)[0]:
        pairs = [f"webhook={pairs[0]}"]
    endpoints: dict[str, str] = {}
    for pair in pairs:
        name, equals, url = (piece.strip() for piece in pair.partition("="))
        if not equals or "://" in name:
            raise ValueError("must be name=URL pairs, e.g. ops=https://hooks.example/digest (or one URL)")
        if not _RECIPIENT_NAME.fullmatch(name):
            raise ValueError(f"recipient name {name[:64]!r}: 1-64 letters, digits, '.', '_' or '-'")
        if name in endpoints:
            raise ValueError(f"recipient {name!r} is named twice")
        try:
            endpoints[name] = _check_url(url)
        except ValueError as exc:
            raise ValueError(f"the URL of {name!r} {exc}") from None
    return endpoints


# Settings that were replaced by others. Unknown variables are ignored (extra="ignore"), so an old one left in a
# ConfigMap would silently stop meaning anything; start-up refuses it instead, naming what to set.
_RETIRED = {
    "command_cooldown_seconds": f"{ENV_PREFIX}COMMAND_BURST and {ENV_PREFIX}COMMAND_BURST_WINDOW_SECONDS",
}


def _refuse_retired(overrides: dict[str, object]) -> None:
    # pydantic-settings reads variable names case-insensitively; so does this check.
    environment = {name.upper() for name in os.environ}
    for name, replacement in _RETIRED.items():
        variable = f"{ENV_PREFIX}{name.upper()}"
        if name in overrides or variable in environment:
            raise ConfigError(f"{variable}: no longer read; set {replacement} instead")


def url_secrets(url: str) -> list[str]:
    """The credentials written in ``url`` as written (``user:pass``, ``pass``) and decoded; [] when it has none.

    A user without a password is a token (``https://TOKEN@host``), so then the user is the secret.
    """
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    credentials = url_userinfo(url)
    if credentials is None:
        return []
    user, password = credentials
    written_password = userinfo.partition(":")[2]
    found = [userinfo, f"{user}:{password}", password, written_password] if password else [userinfo, user]
    return [secret for secret in found if secret]


def _printed_forms(url: str) -> list[str]:
    """The secret parts of ``url`` as httpx prints them in its request log, which re-encodes what it must.

    ``/ping/hb{key}`` is logged as ``/ping/hb%7Bkey%7D``: neither the URL as written nor its standard encodings
    match that, so the path and query as httpx holds them (raw and decoded) are masked too.
    """
    parsed = httpx.URL(url)
    raw_path, _, raw_query = parsed.raw_path.decode("ascii").partition("?")
    forms = [str(parsed).split("://", 1)[-1].partition("/")[2], raw_path, parsed.path, raw_query, parsed.query.decode()]
    return [form for form in forms if len(form) > 1]


def load_settings(**overrides: object) -> Settings:
    """Read the settings from the environment; raise `ConfigError` with one line naming the bad variable."""
    _refuse_retired(overrides)
    try:
        return Settings(**overrides)  # type: ignore[arg-type]  # pydantic validates the overrides at run time
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, ENV_PREFIX)) from None
    except SettingsError as exc:
        # pydantic-settings fails before validation when a complex value (a dict) is not JSON.
        field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else "?"
        raise ConfigError(f"{ENV_PREFIX}{field.upper()}: not valid JSON (expected an object)") from None


def describe_validation_error(exc: ValidationError, prefix: str) -> str:
    """The first problem of a validation error as ``PREFIX_FIELD: reason`` (one line, no input echoed)."""
    first = exc.errors(include_input=False, include_url=False)[0]
    location = [str(part) for part in first.get("loc", ()) if part != "__root__"]
    message = str(first.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    if not location:
        return message
    return f"{prefix}{location[0].upper()}{''.join(f'.{part}' for part in location[1:])}: {message}"
