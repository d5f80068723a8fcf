"""The API's bodies: ``XBase`` -> ``XCreate`` (what a client sends) / ``XPublic`` (what it gets)."""

from __future__ import annotations

from enum import StrEnum
from ipaddress import ip_address
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from reservoir.agent.transfer import MIN_EXTENT_SIZE

__all__ = [
    "AgentVolumePublic",
    "CapsBase",
    "CapsCreate",
    "CapsPublic",
    "ChapCreate",
    "CopyBase",
    "CopyCreate",
    "CopyPublic",
    "CopyState",
    "Health",
    "InfoPublic",
    "IperfResult",
    "IperfRunCreate",
    "IperfRunPublic",
    "IperfServerCreate",
    "IperfServerPublic",
    "ProgressPublic",
    "RangeModel",
    "Verification",
    "VolumePublic",
]

MAX_URL = 4096
MAX_DESTS = 64
COPY_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class CopyState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RangeModel(Strict):
    offset: int = Field(ge=0)
    length: int = Field(gt=0)


class ChapCreate(Strict):
    user: str = Field(min_length=1, max_length=255)
    secret: SecretStr = Field(min_length=12, max_length=255)


Location = Annotated[str, Field(min_length=1, max_length=MAX_URL)]
Verification = Literal["storage", "receipt"]  # the engine's VERIFICATIONS


class CopyBase(Strict):
    """One copy: ``source`` to ``dest``, one location or a list of them.

    With several destinations the source is striped over them RAID-0 style (level 1,
    design.md 3.1): stripe ``s`` of ``stripe_unit`` bytes goes to destination
    ``s % n`` at offset ``(s // n) * stripe_unit``; ``stripe_unit`` is then required,
    and ``paths`` are refused (each destination is reached at its own URL).
    """

    source: str = Field(min_length=1, max_length=MAX_URL)
    dest: Location | list[Location] = Field(
        description="a path or iscsi://HOST[:PORT]/IQN/LUN, or a list of them (striped)"
    )
    stripe_unit: int | None = Field(
        default=None, gt=0, le=1 << 34, description="bytes, with several destinations"
    )
    streams: int = Field(default=4, ge=1, le=256)
    extent_size: int = Field(default=64 << 20, ge=MIN_EXTENT_SIZE, le=1 << 34)
    paths: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="LOCAL=REMOTE[:PORT]; stream i runs on paths[i % len(paths)] (a path may "
        "repeat: the coordinator deals streams to links in proportion to their capacity)",
    )
    verify: bool = True
    verification: Verification = Field(
        default="storage",
        description=(
            "how the copy is verified (with verify): storage (each extent hashed from the "
            "destination's storage once, at the end) or receipt (each extent checked as it "
            "is written and again at the end by the digests of what its writes received, "
            "which the target drops at any change over them; from storage where it kept none)"
        ),
    )
    range: RangeModel | None = None
    congestion: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,15}$",
        description="TCP congestion control of the streams (e.g. bbr, cubic); default: the host's",
    )
    mptcp: bool = Field(
        default=False,
        description=(
            "MPTCP sockets: one subflow per link the kernel knows of (both hosts need "
            "ip mptcp limits, the target's host its other addresses signalled)"
        ),
    )

    @field_validator("extent_size")
    @classmethod
    def _aligned(cls, value: int) -> int:
        if value % 4096:
            raise ValueError("extent_size must be a multiple of 4096")
        return value

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for text in value:
            local, sep, remote = text.partition("=")
            if not sep or not local or not remote:
                raise ValueError(f"path {text!r} is not LOCAL=REMOTE[:PORT]")
        return value

    @field_validator("dest")
    @classmethod
    def _dests(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not 1 <= len(value) <= MAX_DESTS:
            raise ValueError(f"give 1 to {MAX_DESTS} destinations")
        if isinstance(value, list) and len(set(value)) != len(value):
            raise ValueError("a destination appears twice")
        return value

    @field_validator("stripe_unit")
    @classmethod
    def _unit_aligned(cls, value: int | None) -> int | None:
        if value is not None and value % 4096:
            raise ValueError("stripe_unit must be a multiple of 4096")
        return value

    @model_validator(mode="after")
    def _striping(self) -> CopyBase:
        several = len(self.dests) > 1
        if several and self.stripe_unit is None:
            raise ValueError("several destinations need a stripe_unit")
        if not several and self.stripe_unit is not None:
            raise ValueError("stripe_unit only applies to several destinations")
        if several and self.paths:
            raise ValueError("paths apply to one destination; several are reached at their URLs")
        return self

    @property
    def dests(self) -> list[str]:
        return [self.dest] if isinstance(self.dest, str) else list(self.dest)


MAX_CAP = 1 << 40  # segments or bytes/s (8.8 Pbit/s): what the kernel's fields hold
MAX_FLOWS = 256 * 64  # streams a copy may have, times destinations


class CapsBase(Strict):
    stream_cwnd_caps: dict[int, int] = Field(default_factory=dict)  # stream -> segments
    stream_pacing_rates: dict[int, int] = Field(default_factory=dict)  # stream -> bytes/s
    nic_pacing_rates: dict[str, int] = Field(default_factory=dict)  # interface -> bytes/s
    # interface -> the copy's streams through it (fq paces each flow at rate / flows);
    # where not said, the streams are dealt evenly over the paced interfaces
    nic_pacing_flows: dict[str, int] = Field(default_factory=dict)

    @field_validator("stream_cwnd_caps", "stream_pacing_rates")
    @classmethod
    def _per_stream(cls, value: dict[int, int]) -> dict[int, int]:
        for stream, amount in value.items():
            if not 0 <= stream < 256:
                raise ValueError(f"stream {stream} is not between 0 and 255")
            if not 0 < amount < MAX_CAP:
                raise ValueError(f"stream {stream}: the value must be between 1 and {MAX_CAP - 1}")
        return value

    @field_validator("nic_pacing_rates")
    @classmethod
    def _per_nic(cls, value: dict[str, int]) -> dict[str, int]:
        for nic, rate in value.items():
            if not 0 < len(nic) < 16 or "/" in nic or nic in (".", ".."):
                raise ValueError(f"{nic!r} is not an interface name")
            if not 0 < rate < MAX_CAP:
                raise ValueError(f"{nic}: the rate must be between 1 and {MAX_CAP - 1}")
        return value

    @model_validator(mode="after")
    def _flows_of_paced_nics(self) -> CapsBase:
        for nic, flows in self.nic_pacing_flows.items():
            if nic not in self.nic_pacing_rates:
                raise ValueError(f"nic_pacing_flows names {nic!r}, which has no pacing rate")
            if not 0 < flows <= MAX_FLOWS:
                raise ValueError(f"{nic}: the flows must be between 1 and {MAX_FLOWS}")
        return self


class CopyCreate(CopyBase):
    id: str | None = Field(
        default=None,
        pattern=COPY_ID,
        description=(
            "chosen by the client (e.g. the coordinator) to make the create idempotent: "
            "the same id and request again answer the existing copy; a copy re-created "
            "under the same id resumes from its checkpoint"
        ),
    )
    chap: ChapCreate | None = None
    caps: CapsBase | None = Field(
        default=None,
        description=(
            "caps in force from the first connection (the coordinator's pacing plan: NIC "
            "and stream pacing rates); PUT /copies/{id}/caps replaces them"
        ),
    )

    @model_validator(mode="after")
    def _caps_fit(self) -> CopyCreate:
        if self.caps is not None:
            for stream in (*self.caps.stream_cwnd_caps, *self.caps.stream_pacing_rates):
                if stream >= self.streams:
                    raise ValueError(f"caps name stream {stream}; the copy has {self.streams}")
        return self


class ProgressPublic(BaseModel):
    done_bytes: int = 0
    total_bytes: int = 0
    sent_bytes: int = 0
    rate: float = 0.0  # bytes per second
    eta: float | None = None  # seconds
    streams_up: int = 0
    streams: int = 0
    paths_up: int = 0
    paths: int = 0


class CapsCreate(CapsBase):
    pass


class CapsPublic(BaseModel):
    requested: CapsBase
    applied: bool = False
    reason: str


class CopyPublic(CopyBase):
    id: str
    state: CopyState
    created: float
    updated: float
    chap_user: str | None = None
    progress: ProgressPublic
    last_error: str | None = None
    retryable: bool = Field(
        default=False,
        description="failed, but for a side that could not be reached or whose streams "
        "were all lost: resumed once it answers again, the copy goes on from its checkpoint",
    )
    summary: dict[str, Any] | None = None
    caps: CapsPublic | None = None
    checkpoint: str
    runs: int = 0


class Health(BaseModel):
    status: str = "ok"


class VolumePublic(BaseModel):
    target: str
    lun: int
    path: str
    size: int | None
    read_only: bool


class AgentVolumePublic(BaseModel):
    """One volume of the agent (``GET /volumes``): a LUN of its target or one of its
    ``source_volumes``; copies read and write these only."""

    path: str
    kind: Literal["source", "lun"]
    size_bytes: int | None = Field(description="null when the volume cannot be opened")
    device_id: str | None = Field(
        description="naa. and the 32 hex digits of the NAA (INQUIRY VPD 0x83) of the device "
        "the path reaches; null when it does not exist"
    )
    read_only: bool
    iqn: str | None = Field(default=None, description="the target serving it (a LUN)")
    lun: int | None = None
    error: str | None = Field(default=None, description="why the volume is not usable now")


class WarmSessionsPublic(BaseModel):
    """The agent's pool of warm sessions (``warm_sessions`` in its settings)."""

    idle: int = Field(description="sessions kept logged in for the next copy now")
    taken: int = Field(description="sessions a copy took instead of logging in")
    kept: int = Field(description="sessions copies gave back and the pool kept")
    refused: int = Field(description="sessions given back not reusable, logged out")
    evicted: int = Field(description="logged out to stay within the bounds")
    expired: int = Field(description="logged out after warm_idle_timeout unused")
    ping_failed: int = Field(description="logged out after a ping went unanswered")


class NicPublic(BaseModel):
    """A network interface of the agent's host (``GET /info``)."""

    name: str
    addresses: list[str] = Field(description="global and host-scope addresses, IPv4 first")
    speed_bps: int | None = Field(
        description="line rate the kernel reports, bits/s; null where it reports none"
    )
    mtu: int | None
    up: bool = Field(description="administratively up with a carrier")
    loopback: bool


class InfoPublic(BaseModel):
    name: str
    version: str
    storage_backends: list[str]
    tcp_congestion_control: str | None
    tcp_congestion_control_available: list[str]
    tcp_slow_start_after_idle: bool | None = Field(
        default=None,
        description=(
            "whether TCP restarts slow start after an idle period (net.ipv4."
            "tcp_slow_start_after_idle): warm sessions start at speed only without it"
        ),
    )
    warm_sessions: WarmSessionsPublic | None = None
    mptcp: bool
    target_portals: list[str]
    nics: list[NicPublic] = Field(
        default_factory=list, description="the host's interfaces (this network namespace's)"
    )
    volumes: list[VolumePublic]
    caps_requested: dict[str, CapsPublic]
    cpu_seconds: float = Field(
        description=(
            "user + system CPU seconds of the agent process since it started (its copies' "
            "data path included; iperf3 runs are child processes and not included)"
        )
    )


# ---------------------------------------------------------------- iperf3 (iperf.py)


def _ip(value: str | None) -> str | None:
    if value is not None:
        ip_address(value)  # ValueError: "... does not appear to be an IPv4 or IPv6 address"
    return value


IpAddress = Annotated[str, Field(min_length=2, max_length=45)]
Port = Annotated[int, Field(ge=1, le=65535)]
MAX_RATE_BPS = 1 << 50  # 1.1 Pbit/s


class IperfServerCreate(Strict):
    address: IpAddress = Field(description="one of the agent's addresses, bound with -B")
    port: Port | None = Field(default=None, description="default: a free port")
    timeout: float = Field(
        default=120, gt=0, le=900, description="seconds; the server is killed after this"
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        _ip(value)
        return value


class IperfServerPublic(BaseModel):
    id: str
    address: str
    port: int
    state: Literal["listening", "finished", "timed-out", "failed", "stopped"]
    created: float
    finished: float | None = None
    error: str | None = None


class IperfRunCreate(Strict):
    host: IpAddress = Field(description="the iperf3 server's address")
    port: Port
    streams: int = Field(default=1, ge=1, le=128, description="-P")
    duration: int = Field(default=10, ge=1, le=600, description="-t, seconds")
    bind: IpAddress | None = Field(default=None, description="-B, one of the agent's addresses")
    congestion: str | None = Field(
        default=None, pattern=r"^[a-z0-9_]{1,16}$", description="-C, e.g. bbr, cubic"
    )
    fq_rate_bps: int | None = Field(
        default=None, ge=1, le=MAX_RATE_BPS, description="--fq-rate: per-stream pacing, bits/s"
    )
    nic: str | None = Field(
        default=None, min_length=1, max_length=15, description="the NIC paced during the run"
    )
    nic_pacing_bps: int | None = Field(
        default=None, ge=8, le=MAX_RATE_BPS, description="its rate (the agent's NIC pacer), bits/s"
    )

    @field_validator("host", "bind")
    @classmethod
    def _addresses(cls, value: str | None) -> str | None:
        return _ip(value)

    @model_validator(mode="after")
    def _nic_with_rate(self) -> IperfRunCreate:
        if (self.nic is None) != (self.nic_pacing_bps is None):
            raise ValueError("nic and nic_pacing_bps go together")
        if self.nic is not None and ("/" in self.nic or self.nic in (".", "..")):
            raise ValueError(f"{self.nic!r} is not an interface name")
        return self


class IperfResult(BaseModel):
    """What iperf3 -J said, in its names and units (bits/s, seconds, percent)."""

    bits_per_second: float = Field(description="aggregate goodput, at the receiver")
    sent_bits_per_second: float
    bytes_received: int
    seconds: float
    streams: int
    retransmits: int | None = Field(description="all streams, whole run (sender side)")
    stream_bits_per_second: list[list[float]] = Field(
        description="per stream (in order), its bits/s in each interval"
    )
    stream_retransmits: list[int | None]
    cpu_utilization_percent: dict[str, float]
    congestion: str | None = Field(default=None, description="the sender's algorithm")


class IperfRunPublic(IperfRunCreate):
    id: str
    state: Literal["running", "completed", "failed"]
    created: float
    finished: float | None = None
    nic_pacing: str | None = Field(
        default=None, description="how the NIC was paced during the run, or why not"
    )
    nic_paced: bool | None = Field(default=None, description="whether NIC pacing was in force")
    result: IperfResult | None = None
    error: str | None = None
