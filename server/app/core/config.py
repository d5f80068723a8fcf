"""Settings of ``reservoir server``: defaults < TOML file < environment < command line.

Environment variables are prefixed ``RESERVOIR_SERVER_`` (lists as JSON)::

    RESERVOIR_SERVER_ENVIRONMENT=production          # or development
    RESERVOIR_SERVER_DATABASE_URL=postgresql+psycopg://reservoir@db/reservoir
    RESERVOIR_SERVER_LISTEN=127.0.0.1:8470
    RESERVOIR_SERVER_USER_TOKENS='["<token or sha256:hex>"]'
    RESERVOIR_SERVER_SECRET_KEY_FILE=/etc/reservoir/server.key  # default: beside the database
    RESERVOIR_SERVER_CORS_ORIGINS='["https://dashboard.example"]'
    RESERVOIR_SERVER_SCHEDULER=agents                # or off: transfers are only recorded
    RESERVOIR_SERVER_DATA_DIR=/var/lib/reservoir     # campaign runs go to DATA_DIR/campaigns
    RESERVOIR_SERVER_CAMPAIGN_COMMAND='["reservoir", "campaign", "run"]'
    RESERVOIR_SERVER_MAX_BODY_BYTES=1048576          # a larger request body is 413, unread
    RESERVOIR_SERVER_MAX_UPLOAD_BYTES=134217728      # the same for a campaign's results

``--config FILE`` reads the same keys from its ``[server]`` table. A file should
hold token digests (``reservoir server --hash-token`` prints one), not tokens. The file
is checked alone first: it holds the ``[server]`` table only, and each key its TOML
type (``scheduler_interval = "2"`` is a string, not a number); an unknown table or key
is refused with the file, the key and what was expected.

Agents have no shared token: each one's tokens are derived from the secret key
(``secret_key_file``, ``core/agent_credentials.py``); ``agent_tokens`` is refused with
a pointer to ``reservoir server agent-credentials``.

Outside development the server refuses to start without user tokens, with a plain
token shorter than :data:`MIN_TOKEN_LENGTH`, or with CORS open to every origin. In
development, a missing user token is generated and printed once
(:func:`with_generated_tokens`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from reservoir.common import tokens as token_rule
from reservoir.common.listen import parse_listen  # one HOST:PORT rule
from reservoir.common.settings_file import SettingsFileError, describe, read_table
from reservoir.server.app.errors import ServerError

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "ENV_PREFIX",
    "MIN_TOKEN_LENGTH",
    "ServerFile",
    "ServerSettings",
    "SettingsError",
    "default_campaign_command",
    "default_database_url",
    "load_settings",
    "parse_listen",
    "with_generated_tokens",
]

DEFAULT_LISTEN = "127.0.0.1:8470"
ENV_PREFIX = "RESERVOIR_SERVER_"
MIN_TOKEN_LENGTH = 24
DEFAULT_MAX_BODY_BYTES = 1 << 20  # every JSON body of the API is far smaller
DEFAULT_MAX_UPLOAD_BYTES = 128 << 20  # a long campaign's results.json is tens of MB
KEY_FILE = "server.key"
NO_SHARED_AGENT_TOKENS = (
    "agents no longer share tokens: each agent's are derived from the coordinator's "
    "secret key; remove it and give every agent what `reservoir server agent-credentials "
    "NAME` prints"
)


class SettingsError(ServerError):
    """The coordinator's configuration is unusable; the message is one clear line."""


def _state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state"))


def default_database_url() -> str:
    """SQLite in ``$XDG_STATE_HOME/reservoir/server.db`` (``~/.local/state`` by default)."""
    return f"sqlite:///{_state_dir() / 'reservoir' / 'server.db'}"


def default_campaign_command() -> list[str]:
    """``reservoir campaign run`` with this interpreter (the runner's contract:
    ``... CAMPAIGN [--quick] --out DIR`` is appended)."""
    return [sys.executable, "-m", "reservoir", "campaign", "run"]


class _ServerFields(BaseModel):
    """The coordinator's keys: of the ``[server]`` table, the environment and the
    command line."""

    environment: Literal["development", "production"] = "production"
    database_url: str = Field(default_factory=default_database_url, min_length=1)
    listen: str = DEFAULT_LISTEN
    user_tokens: list[SecretStr] = Field(default_factory=list)
    secret_key_file: Path | None = Field(
        default=None,
        strict=False,  # a TOML string
        description="the key every agent's tokens are derived from (made 0600 if missing); "
        f"default: {KEY_FILE} in data_dir, else in the SQLite database's folder, else in "
        "$XDG_STATE_HOME/reservoir",
    )
    cors_origins: list[str] = Field(default_factory=list)
    scheduler: Literal["agents", "off"] = Field(
        default="agents",
        description="agents: run transfers on the agents; off: only record them",
    )
    scheduler_interval: float = Field(
        default=1.0, gt=0, le=60, description="seconds between the scheduler's polls"
    )
    leg_retry_seconds: float = Field(
        default=900.0,
        ge=0,
        le=7 * 86400,
        description="how long a copy that failed for a side it could not reach (a target "
        "restarting, a link down) is resumed by the scheduler, with backoff, before its "
        "transfer fails; 0: never, the transfer fails at once",
    )
    lease_seconds: float = Field(
        default=10.0,
        ge=1,
        le=300,
        description="the leader's lease (leadership.py): a standby coordinator on the same "
        "database leads within lease_seconds * 4/3 of the leader's end",
    )
    advertise_url: str | None = Field(
        default=None,
        description="where this coordinator's API is reached, named by standbys' 503 "
        "answers while it leads; default: http://LISTEN",
    )
    tls_cert: Path | None = Field(
        default=None,
        strict=False,  # a TOML string
        description="PEM certificate (chain) of the API; with tls_key the API is HTTPS",
    )
    tls_key: Path | None = Field(
        default=None, strict=False, description="PEM private key of tls_cert"
    )
    agent_ca_file: Path | None = Field(
        default=None,
        strict=False,
        description="PEM CA certificates that agents' HTTPS certificates are checked "
        "against; default: the system's trust store",
    )
    webhook_urls: list[AnyHttpUrl] = Field(
        default_factory=list,
        max_length=16,
        description="URLs told (POST, JSON) when a transfer completes, fails or is "
        "cancelled (webhooks.py)",
    )
    webhook_secret_file: Path | None = Field(
        default=None,
        strict=False,
        description="a file whose content signs each webhook's body "
        "(X-Reservoir-Signature: sha256=HMAC)",
    )
    data_dir: Path | None = Field(
        default=None,
        strict=False,  # a TOML string
        description="files of the coordinator (campaign runs in campaigns/ID); default: "
        "the SQLite database's folder, else $XDG_STATE_HOME/reservoir",
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        ge=4096,
        le=1 << 30,
        description="largest request body; a larger one is answered 413 before it is read",
    )
    max_upload_bytes: int = Field(
        default=DEFAULT_MAX_UPLOAD_BYTES,
        ge=4096,
        le=1 << 34,
        description="largest body of POST /api/v1/campaigns/results (a run's results.json)",
    )
    agent_unreachable_after: float = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="seconds without a heartbeat after which an agent that sent one is "
        "shown unreachable (agents send one every 15 s by default)",
    )
    campaign_command: list[str] = Field(
        default_factory=default_campaign_command,
        min_length=1,
        description="the campaign runner; CAMPAIGN [--quick] --out DIR are appended",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("user_tokens")
    @classmethod
    def _spelling(cls, value: list[SecretStr]) -> list[SecretStr]:
        for token in value:
            token_rule.check_spelling(token.get_secret_value())
        return value


class ServerFile(_ServerFields):
    """The ``[server]`` table of a settings file, checked alone: no unknown key, and
    each value of its TOML type (strict: the string "2" is not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ServerSettings(_ServerFields, BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        return self

    @model_validator(mode="after")
    def _secure(self) -> ServerSettings:
        if self.environment == "development":
            return self
        _check_tokens("user_tokens", self.user_tokens)
        if "*" in self.cors_origins:
            raise ValueError("cors_origins may not be '*' outside development")
        return self

    @property
    def user_digests(self) -> frozenset[str]:
        return frozenset(token_rule.to_digest(t.get_secret_value()) for t in self.user_tokens)

    @property
    def secret_key_path(self) -> Path:
        """:attr:`secret_key_file`, or ``server.key`` in :attr:`data_path`."""
        return self.secret_key_file or self.data_path / KEY_FILE

    @property
    def host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return parse_listen(self.listen)[1]

    @property
    def public_url(self) -> str:
        """:attr:`advertise_url`, else ``http(s)://`` and the address it listens on."""
        if self.advertise_url:
            return self.advertise_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.tls_cert is not None else "http"
        return f"{scheme}://{host}:{self.port}"

    @property
    def data_path(self) -> Path:
        """:attr:`data_dir`, or the SQLite database's folder, or the state folder."""
        if self.data_dir is not None:
            return self.data_dir
        url = self.database_url
        if url.startswith("sqlite:///") and url.removeprefix("sqlite:///") not in ("", ":memory:"):
            return Path(url.removeprefix("sqlite:///").split("?", 1)[0]).parent
        return _state_dir() / "reservoir"

    @property
    def development(self) -> bool:
        return self.environment == "development"


def _check_tokens(kind: str, tokens: list[SecretStr]) -> None:
    if not tokens:
        raise ValueError(
            f"{kind} is empty: set {ENV_PREFIX}{kind.upper()} (or run with "
            f"{ENV_PREFIX}ENVIRONMENT=development to get generated tokens)"
        )
    for token in tokens:
        text = token.get_secret_value()
        if not token_rule.is_hashed(text) and len(text) < MIN_TOKEN_LENGTH:
            raise ValueError(f"{kind}: a token must have {MIN_TOKEN_LENGTH} characters at least")


def _read_table(path: Path) -> dict[str, Any]:
    """The ``[server]`` table of ``path``, checked against :class:`ServerFile`."""
    try:
        table = read_table(path, "server")
        _refuse_shared_agent_tokens(table)  # with its pointer, not as an unknown key
        ServerFile.model_validate(table)
    except SettingsFileError as exc:
        raise SettingsError(str(exc)) from None
    except ValidationError as exc:
        problems = describe(exc, "server", ServerFile.model_fields)
        raise SettingsError(str(SettingsFileError(path, problems))) from None
    return table


def load_settings(config: str | Path | None = None, **overrides: Any) -> ServerSettings:
    """Settings from ``config``'s ``[server]`` table, the environment and ``overrides``.

    Raises :class:`SettingsError` with the first problem (never the value: it may be
    a token).
    """
    table = _read_table(Path(config)) if config is not None else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    _refuse_shared_agent_tokens(table, given)

    class _Layered(ServerSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, InitSettingsSource(settings_cls, table)

    try:
        return _Layered(**given)
    except ValidationError as exc:
        raise SettingsError(first_error(exc)) from None


def _refuse_shared_agent_tokens(*sources: dict[str, Any]) -> None:
    if any("agent_tokens" in source for source in sources):
        raise SettingsError(f"server.agent_tokens: {NO_SHARED_AGENT_TOKENS}")
    if f"{ENV_PREFIX}AGENT_TOKENS" in os.environ:
        raise SettingsError(f"{ENV_PREFIX}AGENT_TOKENS is set: {NO_SHARED_AGENT_TOKENS}")


def first_error(exc: ValidationError) -> str:
    """The first problem, without the input value (it may be a token)."""
    err = exc.errors(include_input=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"server.{where}: {msg}" if where else msg


def with_generated_tokens(settings: ServerSettings) -> tuple[ServerSettings, dict[str, str]]:
    """In development, a user token if none is set.

    Returns the new settings and the generated token (``{"user": ...}``), for the
    caller to print once; outside development or with user tokens, ``settings``
    unchanged.
    """
    if not settings.development or settings.user_tokens:
        return settings, {}
    made = {"user": token_rule.generate_token()}
    return settings.model_copy(update={"user_tokens": [SecretStr(made["user"])]}), made
