"""The API's bodies: ``XBase`` -> ``XCreate`` (what a client sends) / ``XPublic`` (what it gets)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = [
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
    "ProgressPublic",
    "RangeModel",
    "VolumePublic",
]

MAX_URL = 4096


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


class CopyBase(Strict):
    source: str = Field(min_length=1, max_length=MAX_URL)
    dest: str = Field(min_length=1, max_length=MAX_URL)
    streams: int = Field(default=4, ge=1, le=256)
    extent_size: int = Field(default=64 << 20, ge=4096, le=1 << 34)
    paths: list[str] = Field(default_factory=list, max_length=64)
    verify: bool = True
    range: RangeModel | None = None

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


class CopyCreate(CopyBase):
    chap: ChapCreate | None = None


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


class CapsBase(Strict):
    stream_cwnd_caps: dict[int, int] = Field(default_factory=dict)  # stream -> segments
    stream_pacing_rates: dict[int, int] = Field(default_factory=dict)  # stream -> bytes/s
    nic_pacing_rates: dict[str, int] = Field(default_factory=dict)  # interface -> bytes/s

    @field_validator("stream_cwnd_caps", "stream_pacing_rates")
    @classmethod
    def _per_stream(cls, value: dict[int, int]) -> dict[int, int]:
        for stream, amount in value.items():
            if not 0 <= stream < 256:
                raise ValueError(f"stream {stream} is not between 0 and 255")
            if amount <= 0:
                raise ValueError(f"stream {stream}: the value must be positive")
        return value

    @field_validator("nic_pacing_rates")
    @classmethod
    def _per_nic(cls, value: dict[str, int]) -> dict[str, int]:
        for nic, rate in value.items():
            if not 0 < len(nic) < 16 or "/" in nic or nic in (".", ".."):
                raise ValueError(f"{nic!r} is not an interface name")
            if rate <= 0:
                raise ValueError(f"{nic}: the rate must be positive")
        return value


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


class InfoPublic(BaseModel):
    name: str
    version: str
    storage_backends: list[str]
    tcp_congestion_control: str | None
    tcp_congestion_control_available: list[str]
    mptcp: bool
    target_portals: list[str]
    volumes: list[VolumePublic]
    caps_requested: dict[str, CapsPublic]
