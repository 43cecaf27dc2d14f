"""Settings from the environment (prefix ``DIGEST_``), read once at start and passed down.

Secrets have ``_FILE`` variants (as in healthchecks and the Docker convention) so that a Kubernetes Secret can be
mounted as a file instead of being placed in the environment; a secret is kept as `SecretStr` and never printed.
A bad value fails at start with `ConfigError`, whose message is one line naming the variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from digest.sources import Endpoint

ENV_PREFIX = "DIGEST_"


class ConfigError(Exception):
    """A configuration problem, described in one line that names the setting."""


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


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

    vl_bearer_token: SecretStr | None = None
    vl_bearer_token_file: Path | None = None
    vl_username: str | None = None
    vl_password: SecretStr | None = None
    vl_password_file: Path | None = None
    vl_headers: dict[str, str] = Field(default_factory=dict)
    vl_account_id: Annotated[int, Field(ge=0)] | None = None
    vl_project_id: Annotated[int, Field(ge=0)] | None = None

    query_timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    max_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    policy_file: Path | None = None

    @field_validator("vm_url", "vl_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)

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
        for name in ("vm_bearer_token", "vm_password", "vl_bearer_token", "vl_password"):
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
            # The model is frozen; setting the resolved secret once here is the only mutation.
            object.__setattr__(self, name, SecretStr(secret))
        for prefix in ("vm", "vl"):
            if getattr(self, f"{prefix}_password") is not None and not getattr(self, f"{prefix}_username"):
                raise ValueError(
                    f"{ENV_PREFIX}{prefix.upper()}_PASSWORD is set without {ENV_PREFIX}{prefix.upper()}_USERNAME"
                )
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def vm_endpoint(self) -> Endpoint:
        """How to reach VictoriaMetrics (or vmselect / Prometheus)."""
        return self._endpoint(
            "VictoriaMetrics",
            self.vm_url,
            self.vm_bearer_token,
            self.vm_username,
            self.vm_password,
            self.vm_headers,
            {},
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
        )


def load_settings(**overrides: object) -> Settings:
    """Read the settings from the environment; raise `ConfigError` with one line naming the bad variable."""
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
