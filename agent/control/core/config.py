"""Settings of ``reservoir agent serve``, read from the ``[agent]`` table of a TOML file.

::

    [agent]
    name = "agent-a"
    listen = "127.0.0.1:8740"
    tokens = ["sha256:<64 hex digits>"]             # required; or plain tokens; never logged
    coordinator = "https://coordinator:8470"        # optional: send heartbeats there
    coordinator_token_file = "coordinator.token"    # its heartbeat token (with coordinator)
    coordinator_ca_file = "ca.pem"                  # optional: the CA of its HTTPS certificate
    heartbeat_interval = 15.0                       # s between heartbeats
    state_dir = "/var/lib/reservoir/agent"
    target_config = "target.toml"                   # optional builtin iSCSI target
    source_volumes = ["/dev/vdb", "images/a.img"]   # files or block devices besides the LUNs
    target_mptcp = false                            # the target listens with MPTCP sockets
    max_running = 4
    max_body_bytes = 1048576                        # a larger request body is 413, unread
    warm_sessions = 256                             # sessions kept between copies (0: none)
    warm_sessions_per_path = 64
    warm_idle_timeout = 90.0                        # s an unused warm session is kept
    tls_cert = "agent.crt"                          # optional: HTTPS (both or neither)
    tls_key = "agent.key"

The file holds the ``[agent]`` table only, and each key its TOML type: an unknown
table or key, or ``nic_pacing = "false"`` (a string, not a boolean), is refused with
the file, the key and what was expected. Relative paths are relative to the file.
The agent copies only from and to its volumes: the LUNs of its target and the
``source_volumes`` (read and written; each must exist when a copy names it). Any
other local path in a copy is refused.
There is no default token: the agent
refuses to start without one, and a token shorter than 16 characters is refused.
A token may be given as its digest ``sha256:<64 lowercase hex digits>`` (what
``reservoir server agent-credentials NAME`` prints for the coordinator's token): the
agent keeps only digests in memory, plain tokens hashed at load
(:mod:`reservoir.common.tokens`). ``coordinator_token_file`` names the file holding the
agent's heartbeat token towards the coordinator (printed by the same command); with
``coordinator`` (its base URL) the agent sends a heartbeat every ``heartbeat_interval``
seconds, and the coordinator shows it unreachable when they stop.
Without TLS the tokens cross the network in clear: ``serve`` warns when the API
listens on another address than loopback without ``tls_cert``/``tls_key``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from reservoir.agent.control.errors import ControlError
from reservoir.common import tokens as token_rule
from reservoir.common.listen import parse_listen
from reservoir.common.settings_file import SettingsFileError, describe, read_table

__all__ = [
    "DEFAULT_LISTEN",
    "MIN_TOKEN_LENGTH",
    "AgentSettings",
    "AgentSettingsError",
    "load_settings",
    "parse_listen",
]

DEFAULT_LISTEN = "127.0.0.1:8740"
MIN_TOKEN_LENGTH = 16


class AgentSettingsError(ControlError):
    """The agent's configuration is unusable; the message is one clear line."""


class AgentSettings(BaseModel):
    # strict: each key has its TOML type (a string "false" is not a boolean, 4.0 not
    # an integer); paths are TOML strings, hence not strict.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(default_factory=socket.gethostname, min_length=1, max_length=128)
    listen: str = DEFAULT_LISTEN
    tokens: list[SecretStr] = Field(min_length=1)  # their digests once loaded
    # The agent's heartbeat token towards the coordinator, alone in this file (chmod 600).
    coordinator_token_file: Path | None = Field(default=None, strict=False)
    # The coordinator's base URL (http or https): heartbeats go there when it is set.
    coordinator: str | None = Field(default=None, pattern=r"^https?://[^/\s]+(/\S*)?$")
    heartbeat_interval: float = Field(default=15.0, ge=1.0, le=3600.0)
    # PEM CA certificates the coordinator's HTTPS certificate is checked against
    # (default: the system's trust store).
    coordinator_ca_file: Path | None = Field(default=None, strict=False)
    state_dir: Path = Field(strict=False)
    target_config: Path | None = Field(default=None, strict=False)
    # Files or block devices copies may read and write besides the target's LUNs.
    source_volumes: list[Annotated[Path, Strict(False)]] = Field(
        default_factory=list, max_length=4096
    )
    max_running: int = Field(default=4, ge=1, le=256)
    # A request body larger than this is answered 413 before it is read.
    max_body_bytes: int = Field(default=1 << 20, ge=4096, le=1 << 30)
    # Warm sessions: the iSCSI sessions of a copy that ended well are kept logged in
    # (pinged) and taken by the next copy over the same path, which then starts without
    # a connect, a login or a slow start; at most this many in all (0: a copy logs its
    # sessions out), this many per path, each for this many seconds unused.
    warm_sessions: int = Field(default=256, ge=0, le=65536)
    warm_sessions_per_path: int = Field(default=64, ge=1, le=4096)
    warm_idle_timeout: float = Field(default=90.0, gt=0, le=86400)
    # How cwnd caps are applied: "bpf" (a sock_ops program, falling back to
    # "pacing-rate" where BPF is not possible), "pacing-rate" (SO_MAX_PACING_RATE), "off".
    cwnd_caps: Literal["bpf", "pacing-rate", "off"] = "bpf"
    # Jump start (needs cwnd_caps = "bpf"): a copy that paces its NICs opens each new
    # connection with the window that carries its stream's share of the NIC rate for a
    # round trip, not 10 segments; and the builtin target offers every connection this
    # receive window (bytes) from its first segment (0: the kernel's, about 64 KiB).
    jump_start: bool = True
    initial_receive_window: int = Field(default=16 << 20, ge=0, le=1 << 30)
    # Whether the NIC pacing rates a copy's caps name are applied (a root qdisc on
    # each NIC while the copy runs; needs CAP_NET_ADMIN).
    nic_pacing: bool = True
    # The builtin target listens with MPTCP sockets (plain TCP initiators still connect;
    # for subflows over other links, signal them: ip mptcp endpoint add ADDR dev DEV signal).
    target_mptcp: bool = False
    # PEM; with tls_key, the API is served over HTTPS
    tls_cert: Path | None = Field(default=None, strict=False)
    tls_key: Path | None = Field(default=None, strict=False)

    @model_validator(mode="after")
    def _tls_pair(self) -> AgentSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        return self

    @model_validator(mode="after")
    def _heartbeat_token(self) -> AgentSettings:
        if self.coordinator is not None and self.coordinator_token_file is None:
            raise ValueError(
                "coordinator needs coordinator_token_file (the agent's heartbeat token: "
                "reservoir server agent-credentials NAME prints it)"
            )
        return self

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, value: list[SecretStr]) -> list[SecretStr]:
        """Each token's digest (a digest stays as it is)."""
        digests = []
        for token in value:
            text = token.get_secret_value()
            token_rule.check_spelling(text)
            if len(text) < MIN_TOKEN_LENGTH:
                raise ValueError(f"a token must have {MIN_TOKEN_LENGTH} characters at least")
            digests.append(SecretStr(token_rule.to_digest(text)))
        return digests

    @property
    def host(self) -> str:
        return parse_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return parse_listen(self.listen)[1]


def _resolve(base: Path, raw: dict[str, Any], key: str) -> None:
    if isinstance(raw.get(key), str):
        raw[key] = str(base / raw[key])


def _resolve_list(base: Path, raw: dict[str, Any], key: str) -> None:
    if isinstance(raw.get(key), list):
        raw[key] = [str(base / p) if isinstance(p, str) else p for p in raw[key]]


def load_settings(path: str | Path) -> AgentSettings:
    """Reads the ``[agent]`` table of ``path``; raises :class:`AgentSettingsError`."""
    path = Path(path)
    try:
        raw = read_table(path, "agent")
    except SettingsFileError as exc:
        raise AgentSettingsError(str(exc)) from None
    for key in (
        "state_dir",
        "target_config",
        "tls_cert",
        "tls_key",
        "coordinator_token_file",
        "coordinator_ca_file",
    ):
        _resolve(path.parent, raw, key)
    _resolve_list(path.parent, raw, "source_volumes")
    try:
        return AgentSettings.model_validate(raw)
    except ValidationError as exc:
        problems = describe(exc, "agent", AgentSettings.model_fields)
        raise AgentSettingsError(str(SettingsFileError(path, problems))) from None
