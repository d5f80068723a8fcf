"""The API's bodies: ``XBase`` -> ``XCreate`` (what a client sends) / ``XPublic`` (what it gets).

No body carries an agent's credentials: the coordinator derives each agent's tokens
from its secret key (``core/agent_credentials.py``); :class:`AgentCreate` refuses an
``api_token`` with a pointer to ``reservoir server agent-credentials``.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

__all__ = [
    "AgentBase",
    "AgentCreate",
    "AgentPublic",
    "Health",
    "HeartbeatCreate",
    "LegPublic",
    "LinkBase",
    "LinkCreate",
    "LinkProbePublic",
    "LinkPublic",
    "LinkRecommendationPublic",
    "LinkSource",
    "MemberBase",
    "MemberPublic",
    "NicBase",
    "PacingBase",
    "PacingPolicy",
    "ProbeCreate",
    "ProbeRunPublic",
    "RecommendationApplied",
    "StreamSamplePublic",
    "TransferBase",
    "TransferCreate",
    "TransferEventPublic",
    "TransferPublic",
    "TransferState",
    "VolumeBase",
    "VolumePublic",
    "VolumeSetBase",
    "VolumeSetCreate",
    "VolumeSetPublic",
]

BLOCK = 4096
Name = Annotated[
    str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")
]
_IQN = re.compile(r"^(iqn\.\d{4}-\d{2}\.[^\s]+|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16,32})$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TransferState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class PacingPolicy(StrEnum):
    OFF = "off"
    PER_NIC = "per-nic"
    PER_SOCKET = "per-socket"


class LinkSource(StrEnum):
    DECLARED = "declared"
    MEASURED = "measured"


# ---------------------------------------------------------------- agents


MAX_BPS = 10**15  # 1 Pbit/s: above any NIC or link, and within a 64-bit column
MAX_BYTES = 1 << 60  # 1 EiB: above any volume, and within a 64-bit column


class NicBase(Strict):
    name: str = Field(min_length=1, max_length=15, pattern=r"^[^/\s]+$")
    address: str = Field(min_length=1, max_length=64, description="IPv4/IPv6 address")
    speed_bps: int = Field(gt=0, le=MAX_BPS, description="line rate in bits per second")


class VolumeBase(Strict):
    """A volume of the agent: a local ``path``, or an ``iqn`` and ``lun`` it serves.

    A volume written by another agent (a transfer's destination) must be served over
    iSCSI: give ``iqn`` and ``lun``, and ``portal`` (``HOST:PORT`` of the agent's target);
    without ``portal`` the agent's first NIC address and port 3260 are used. A source
    volume is read by its own agent from its ``path``, or through its portal. The
    agent must report the volume (its ``GET /volumes``: the same path, or that LUN of
    its target) at registration.
    """

    name: Name
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    iqn: str | None = Field(default=None, max_length=223)
    lun: int | None = Field(default=None, ge=0, le=16383)
    size_bytes: int = Field(gt=0, le=MAX_BYTES)
    block_size: int = Field(default=512, ge=512, le=1 << 20)
    portal: str | None = Field(
        default=None,
        max_length=262,
        pattern=r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):[0-9]{1,5}$",
        description="HOST:PORT of the iSCSI target serving iqn/lun",
    )

    @field_validator("iqn")
    @classmethod
    def _iqn(cls, value: str | None) -> str | None:
        if value is not None and not _IQN.match(value):
            raise ValueError(f"{value!r} is not an iSCSI name (iqn., eui. or naa.)")
        return value

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("block_size must be a power of two")
        return value

    @model_validator(mode="after")
    def _where(self) -> VolumeBase:
        if (self.path is None) == (self.iqn is None):
            raise ValueError("give either path or iqn (with lun)")
        if self.portal is not None and self.iqn is None:
            raise ValueError("portal goes with iqn and lun")
        if (self.iqn is None) != (self.lun is None):
            raise ValueError("iqn and lun go together")
        if self.size_bytes % self.block_size:
            raise ValueError("size_bytes must be a multiple of block_size")
        return self


class VolumePublic(VolumeBase):
    device_id: str | None = Field(
        default=None,
        description=(
            "the device the agent reported for this volume at registration: naa. and the "
            "32 hex digits of its NAA (INQUIRY VPD 0x83); one device has one id under any "
            "name, path or portal"
        ),
    )


_LABEL_KEY_TEXT = r"[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?"
LABEL_KEY = rf"^{_LABEL_KEY_TEXT}$"
LABEL_FILTER = rf"^{_LABEL_KEY_TEXT}(=.{{0,255}})?$"  # key or key=value
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY)]
LabelValue = Annotated[str, StringConstraints(min_length=0, max_length=255)]
MAX_LABELS = 32
Labels = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=MAX_LABELS,
        description="key=value labels to list it by (GET ...?label=key=value); keys "
        "lowercase letters, digits and ._/- (63 at most), values 255 characters at most",
    ),
]


class AgentBase(Strict):
    name: Name
    control_url: AnyHttpUrl = Field(description="the agent's control API, e.g. http://host:8740")
    nics: list[NicBase] = Field(default_factory=list, max_length=64)
    volumes: list[VolumeBase] = Field(default_factory=list, max_length=4096)
    capabilities: list[str] = Field(default_factory=list, max_length=64)
    labels: Labels = Field(default_factory=dict)

    @field_validator("nics", "volumes")
    @classmethod
    def _unique_names(
        cls, value: list[NicBase] | list[VolumeBase]
    ) -> list[NicBase] | list[VolumeBase]:
        names = [item.name for item in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"the name {name!r} appears twice")
        return value

    @field_validator("capabilities")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        for cap in value:
            if not 0 < len(cap) <= 64:
                raise ValueError("a capability is 1 to 64 characters")
        return sorted(set(value))


class AgentCreate(AgentBase):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "site-a-disk-1",
                    "control_url": "https://10.0.1.11:8740",
                    "nics": [{"name": "eth1", "address": "10.0.1.11", "speed_bps": 10**10}],
                    "volumes": [
                        {"name": "vol0", "path": "/dev/nvme0n1", "size_bytes": 1 << 40},
                        {
                            "name": "lun1",
                            "iqn": "iqn.2026-11.org.reservoir:site-a-disk-1",
                            "lun": 1,
                            "size_bytes": 1 << 40,
                            "block_size": 4096,
                        },
                    ],
                    "capabilities": ["io_uring", "bpf-cwnd-clamp", "fq"],
                }
            ]
        }
    )

    discover: bool = Field(
        default=False,
        description="ask the agent (GET /info, GET /volumes) for what is not given: its NICs "
        "that are up with an address (loopback ones only for an agent on a loopback "
        "address), and every volume it can use (LUNs as lunN, files by their names)",
    )
    nic_speed_bps: int | None = Field(
        default=None,
        gt=0,
        le=MAX_BPS,
        description="with discover: the line rate of NICs whose kernel reports none",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_api_token(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_token" in data:
            del data["api_token"]  # out of the input before the error quotes it
            raise ValueError(
                "api_token is not accepted: the coordinator derives each agent's control "
                "token from its secret key; configure the agent with what `reservoir "
                "server agent-credentials NAME` prints"
            )
        return data


class NicPatch(Strict):
    name: str = Field(min_length=1, max_length=15, description="the NIC to change")
    address: str | None = Field(default=None, min_length=1, max_length=64)
    speed_bps: int | None = Field(default=None, gt=0, le=MAX_BPS, description="its line rate")


class AgentPatch(Strict):
    """What may change of a registered agent; what is not given stays. (Its name, which
    its tokens derive from, and its volumes, which volume sets hold, do not change.)"""

    control_url: AnyHttpUrl | None = None
    nics: list[NicPatch] = Field(default_factory=list, max_length=64)
    capabilities: list[str] | None = Field(default=None, max_length=64)
    labels: dict[LabelKey, LabelValue | None] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="merged into its labels (JSON merge patch: null removes one)",
    )
    rotate_tokens: bool = Field(
        default=False,
        description="move the agent to its next token generation: the coordinator presents "
        "a new control token and takes only the new heartbeat token (`reservoir server "
        "agent-credentials NAME --generation N` prints them; give the agent the new "
        "digest first, beside the old one)",
    )


class HeartbeatCreate(Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ok", "version": "0.1.0"}]}
    )
    status: str = Field(default="ok", min_length=1, max_length=32)
    version: str | None = Field(default=None, max_length=64)


class AgentPublic(AgentBase):
    id: str
    volumes: list[VolumePublic]  # type: ignore[assignment]  # with the device ids
    token_generation: int = Field(
        default=0, description="which tokens it takes: 0 at registration, +1 per rotation"
    )
    status: str
    version: str | None
    registered_at: datetime
    last_heartbeat_at: datetime | None


# ---------------------------------------------------------------- volume sets


class MemberBase(Strict):
    agent_id: str = Field(min_length=1, max_length=36)
    volume: str = Field(min_length=1, max_length=128, description="the agent's volume name")


class MemberPublic(MemberBase):
    agent_name: str
    size_bytes: int


class VolumeSetBase(Strict):
    name: Name
    members: list[MemberBase] = Field(min_length=1, max_length=1024)
    stripe_unit: int = Field(
        default=4 << 20, gt=0, le=1 << 34, description="bytes, a multiple of 4096"
    )

    @field_validator("stripe_unit")
    @classmethod
    def _aligned(cls, value: int) -> int:
        if value % BLOCK:
            raise ValueError(f"stripe_unit must be a multiple of {BLOCK}")
        return value


class VolumeSetCreate(VolumeSetBase):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "site-a-images",
                    "members": [
                        {"agent_id": "6f1c0d9e-4c7b-4c41-9d0e-5b1e0f1a2b3c", "volume": "vol0"},
                        {"agent_id": "0b7e3a55-1f0d-4f4a-8c43-9a8e7d6c5b4a", "volume": "vol0"},
                    ],
                    "stripe_unit": 4 << 20,
                }
            ]
        }
    )

    @model_validator(mode="after")
    def _distinct(self) -> VolumeSetCreate:
        seen = [(m.agent_id, m.volume) for m in self.members]
        if len(set(seen)) != len(seen):
            raise ValueError("a volume appears twice in members")
        return self


class VolumeSetPublic(VolumeSetBase):
    id: str
    members: list[MemberPublic]  # type: ignore[assignment]  # the richer member
    capacity_bytes: int = Field(description="striped capacity: members x smallest member")
    created_at: datetime


# ---------------------------------------------------------------- links


class LinkBase(Strict):
    name: Name
    agent_a: str = Field(min_length=1, max_length=36, description="agent id")
    nic_a: str = Field(min_length=1, max_length=15)
    agent_b: str = Field(min_length=1, max_length=36, description="agent id")
    nic_b: str = Field(min_length=1, max_length=15)
    capacity_bps: int = Field(gt=0, le=MAX_BPS, description="bits per second")
    rtt_ms: float = Field(ge=0, le=10_000)
    source: LinkSource = LinkSource.DECLARED
    bottleneck: Name | None = Field(
        default=None,
        description=(
            "the name of a constraint this link shares with others (a router queue, a WAN "
            "circuit): the equalizer evens out the streams of all links with the same "
            "bottleneck together; without one, each link's streams on their own"
        ),
    )

    @model_validator(mode="after")
    def _two_ends(self) -> LinkBase:
        if self.agent_a == self.agent_b:
            raise ValueError("a link joins two different agents")
        return self


class LinkCreate(LinkBase):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "a1-b1-lfn",
                    "agent_a": "6f1c0d9e-4c7b-4c41-9d0e-5b1e0f1a2b3c",
                    "nic_a": "eth1",
                    "agent_b": "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a",
                    "nic_b": "eth1",
                    "capacity_bps": 10**10,
                    "rtt_ms": 100.0,
                    "source": "declared",
                    "bottleneck": "wan-a-b",
                }
            ]
        }
    )


Direction = Literal["a-to-b", "b-to-a"]


def _both_directions() -> list[Direction]:
    return ["a-to-b", "b-to-a"]


class ProbeCreate(Strict):
    """What a probe of a link tries (``probe.py``): every stream count, unpaced and at
    every pacing fraction of the link's capacity, in every direction."""

    streams: list[Annotated[int, Field(ge=1, le=128)]] = Field(
        default_factory=lambda: [1, 4, 8, 16], min_length=1, max_length=8
    )
    pacing: list[Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=lambda: [0.95],
        max_length=4,
        description="NIC pacing rates tried besides unpaced, as fractions of capacity_bps",
    )
    duration: int = Field(default=5, ge=1, le=60, description="seconds per iperf3 run")
    directions: list[Direction] = Field(
        default_factory=_both_directions, min_length=1, max_length=2
    )
    congestion: str | None = Field(default=None, pattern=r"^[a-z0-9_]{1,16}$")

    @model_validator(mode="after")
    def _distinct(self) -> ProbeCreate:
        for name in ("streams", "pacing", "directions"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists a value twice")
        return self


class ProbeRunPublic(BaseModel):
    """One iperf3 run of a probe (bits/s; retransmits over the whole run)."""

    direction: Direction
    streams: int
    pacing_bps: int | None = Field(description="the sending NIC's pacing rate; null: unpaced")
    nic_paced: bool | None = Field(default=None, description="whether the agent paced the NIC")
    bits_per_second: float
    retransmits: int | None
    stream_bits_per_second: list[float] = Field(description="per stream, mean over the run")
    cpu_percent: float | None = Field(default=None, description="the sender's CPU, all cores")


class LinkProbePublic(BaseModel):
    state: Literal["running", "completed", "failed"]
    started_at: datetime | None
    finished_at: datetime | None = None
    error: str | None = None


class LinkRecommendationPublic(BaseModel):
    """What transfers over the link use unless their request says otherwise."""

    streams: int = Field(description="streams per server pair")
    nic_pacing_bps: dict[Literal["a", "b"], int | None] = Field(
        description=(
            "the pacing of the sending NIC (a: nic_a when agent_a sends, b: nic_b when "
            "agent_b sends), bits/s; null: unpaced"
        )
    )
    measured_at: datetime
    measurements: list[ProbeRunPublic] = Field(default_factory=list)


class LinkPublic(LinkBase):
    id: str
    created_at: datetime
    probe: LinkProbePublic | None = Field(default=None, description="the last probe")
    recommendation: LinkRecommendationPublic | None = Field(
        default=None, description="from the last completed probe"
    )


# ---------------------------------------------------------------- transfers


class PacingBase(Strict):
    policy: PacingPolicy = PacingPolicy.PER_NIC
    margin: float = Field(
        default=0.05, ge=0, lt=1, description="fraction of the share left unused, 0.05 = 5%"
    )


class TransferPatch(Strict):
    """What may change of a transfer once created (JSON merge patch: a label set to null
    is removed, one not named is kept)."""

    labels: dict[LabelKey, LabelValue | None] = Field(default_factory=dict, max_length=MAX_LABELS)


class TransferBase(Strict):
    source: str = Field(min_length=1, max_length=36, description="source volume set id")
    destination: str = Field(min_length=1, max_length=36, description="destination volume set id")
    streams_per_pair: int = Field(default=8, ge=1, le=256)
    paths: list[str] = Field(default_factory=list, max_length=64, description="link ids")
    pacing: PacingBase = Field(default_factory=PacingBase)
    equalizer: bool = True
    verify: bool = True
    verification: Literal["storage", "receipt"] = Field(
        default="storage",
        description=(
            "how the agents verify the copy (with verify): storage (each extent hashed "
            "from the destination's storage once, at the end) or receipt (each extent "
            "checked as it is written and again at the end by the digests of what its "
            "writes received, which the target drops at any change over them; from storage "
            "where it kept none)"
        ),
    )
    congestion: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,15}$",
        description=(
            "TCP congestion control of the streams (bbr, cubic, ...: one the source agents "
            "have, see GET /agents/{id}/info); default: the source hosts' own"
        ),
    )
    labels: Labels = Field(default_factory=dict)
    multilink: Literal["paths", "mptcp"] = Field(
        default="paths",
        description=(
            "paths: each stream bound to one of `paths` (failed paths' work moves to the "
            "others); mptcp: MPTCP sockets to the destination's portal, the kernel adding a "
            "subflow per link (the hosts need `ip mptcp limits`, the destination its other "
            "addresses signalled, and the destination agent `target_mptcp = true`)"
        ),
    )

    @model_validator(mode="after")
    def _different_sets(self) -> TransferBase:
        if self.source == self.destination:
            raise ValueError("source and destination are the same volume set")
        if len(set(self.paths)) != len(self.paths):
            raise ValueError("a link appears twice in paths")
        return self


class TransferCreate(TransferBase):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "source": "3a0f6c2e-8d1b-4b7a-9e5c-2d4f6a8b0c1e",
                    "destination": "7c5e3a1f-9b8d-4c6e-a2f0-1e3d5c7b9a8f",
                    "streams_per_pair": 16,
                    "paths": ["5b9d7f1a-3c5e-4a7b-9d1f-3e5a7c9b1d2f"],
                    "pacing": {"policy": "per-nic", "margin": 0.05},
                    "equalizer": True,
                    "verify": True,
                    "verification": "storage",
                }
            ]
        }
    )


class LegPublic(BaseModel):
    index: int
    source_agent: str
    source_volume: str
    dest_agent: str
    dest_volume: str
    bytes: int
    streams: int
    paths: list[str]
    state: TransferState
    copy_id: str | None = Field(default=None, description="the source agent's copy")
    copy_state: str | None = Field(default=None, description="its state, as the agent last said")
    done_bytes: int = 0
    last_error: str | None = None
    summary: dict[str, Any] | None = Field(
        default=None, description="the agent copy's summary, once completed"
    )


class RecommendationApplied(BaseModel):
    """What a transfer took from its links' probes (the request left it open)."""

    streams_per_pair: int | None = Field(default=None, description="null: not from a probe")
    nic_pacing_bps: dict[str, dict[str, int | None]] = Field(
        default_factory=dict, description="link id -> side (a, b) -> bits/s, null: unpaced"
    )
    links: list[str] = Field(default_factory=list, description="the links whose probes were used")


class TransferPublic(TransferBase):
    id: str
    recommendation_applied: RecommendationApplied | None = None
    state: TransferState
    total_bytes: int
    done_bytes: int = 0
    last_error: str | None = None
    legs: list[LegPublic]
    created_at: datetime
    updated_at: datetime
    idempotency_key: str | None = Field(
        default=None, description="the Idempotency-Key header it was created with"
    )
    started_at: datetime | None = Field(default=None, description="when it first ran")
    completed_at: datetime | None = Field(default=None, description="when it completed")
    rate_bps: float | None = Field(
        default=None,
        description="bit/s of data since it last began running (paused time not counted); "
        "null unless running for a second with data moved",
    )
    eta_seconds: float | None = Field(
        default=None, description="seconds left at rate_bps (null when rate_bps is)"
    )


class TransferEventPublic(BaseModel):
    id: int
    at: datetime
    kind: str
    from_state: TransferState | None
    to_state: TransferState | None
    detail: str


class Health(BaseModel):
    status: str = "ok"
    role: Literal["leader", "standby"] | None = Field(
        default=None,
        description="leader: this coordinator runs the scheduler; standby: another one does "
        "(or none, while the lease has run out); null: not serving (no lifespan)",
    )
    leader_url: str | None = Field(
        default=None, description="where the leading coordinator serves its API, if one leads"
    )


class NicPacingPublic(BaseModel):
    """A NIC pacing rate in force for a transfer, as its source agent last reported it."""

    agent: str = Field(description="the agent's name")
    nic: str
    rate_bytes_per_second: int
    updated_at: datetime = Field(description="when the agent last reported it")


class StreamSamplePublic(BaseModel):
    """One stream over one sampling interval (the agent's TCP_INFO, iperf3 names)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "leg": 0,
                    "copy_id": "0b6f1c9e-5d1a-4f8e-9a43-1f2d3c4b5a69-leg0",
                    "stream": "3",
                    "path": "l1",
                    "time": 1795273204.501,
                    "bits_per_second": 191238775.65,
                    "snd_cwnd": 8094320,
                    "rtt": 102002,
                    "rttvar": 1250,
                    "retransmits": 0,
                    "cap": 5200,
                    "busy": 1.0,
                    "rwnd_limited": 0.0,
                    "sndbuf_limited": 0.12,
                }
            ]
        }
    )

    leg: int = Field(description="index of the first leg of the agent copy carrying it")
    copy_id: str = Field(description="the source agent's copy")
    stream: str = Field(description="the stream's id within the copy")
    path: str | None = Field(default=None, description="the engine's path id")
    time: float = Field(description="Unix seconds (the agent's clock) at the interval's end")
    bits_per_second: float | None = Field(default=None, description="acknowledged throughput")
    snd_cwnd: int | None = Field(default=None, description="congestion window, bytes")
    rtt: int | None = Field(default=None, description="smoothed RTT, microseconds")
    rttvar: int | None = Field(default=None, description="RTT variance, microseconds")
    retransmits: int | None = Field(default=None, description="segments retransmitted in it")
    cap: int | None = Field(default=None, description="the cwnd cap in force, segments")
    busy: float | None = Field(
        default=None,
        description="share of the interval with data in flight or waiting to be sent"
        " (counting the two stalls below); the rest the stream had nothing to send",
    )
    rwnd_limited: float | None = Field(
        default=None, description="share of the interval stalled on the receiver's window"
    )
    sndbuf_limited: float | None = Field(
        default=None, description="share of the interval stalled on the send buffer"
    )
    span: float | None = Field(
        default=None,
        description="seconds this sample stands for, ending at its time: one agent interval,"
        " or, further back than 15 minutes, the samples merged into it (rates and shares"
        " are their means, retransmits their sum); null: one interval of unknown length",
    )
