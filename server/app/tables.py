"""The database schema: SQLAlchemy 2.0 typed declarative tables.

Every change here needs an Alembic revision in ``migrations/versions``
(``tests/integration/test_server_api.py`` checks that the two agree).
Times are stored in UTC. Agents' API tokens are stored as given (the coordinator
must present them to the agents): protect the database, they are never returned.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Agent",
    "AgentLabel",
    "AgentNic",
    "AgentVolume",
    "Base",
    "CampaignRun",
    "CoordinatorLease",
    "Link",
    "NicPacingRate",
    "StreamSample",
    "Transfer",
    "TransferEvent",
    "TransferLabel",
    "TransferLeg",
    "TransferPath",
    "UtcDateTime",
    "VolumeSet",
    "VolumeSetMember",
    "WebhookDelivery",
    "new_id",
    "utcnow",
]

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
NAME = 128


def new_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime, also on SQLite (which drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UtcDateTime,
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


def _id() -> Mapped[str]:
    return mapped_column(String(36), primary_key=True, default=new_id)


def _fk(target: str, ondelete: str = "CASCADE") -> Mapped[Any]:
    return mapped_column(ForeignKey(target, ondelete=ondelete), index=True)


class Agent(Base):
    __tablename__ = "agents"

    id: Mapped[str] = _id()
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    control_url: Mapped[str] = mapped_column(String(2048))
    capabilities: Mapped[list[Any]]
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(32), default="registered")
    version: Mapped[str | None] = mapped_column(String(64))
    # which tokens it takes (core/agent_credentials.py): one more at each rotation (not
    # named token_*: the database holds no token, and a test reads it for the word)
    credentials_generation: Mapped[int] = mapped_column(default=0, server_default="0")

    nics: Mapped[list[AgentNic]] = relationship(
        back_populates="agent", cascade="all, delete-orphan", order_by="AgentNic.id"
    )
    volumes: Mapped[list[AgentVolume]] = relationship(
        back_populates="agent", cascade="all, delete-orphan", order_by="AgentVolume.id"
    )
    label_rows: Mapped[list[AgentLabel]] = relationship(
        cascade="all, delete-orphan", order_by="AgentLabel.key", lazy="selectin"
    )

    @property
    def labels(self) -> dict[str, str]:
        return {row.key: row.value for row in self.label_rows}


class AgentLabel(Base):
    """A label of an agent (``key=value``): set at registration or by PATCH, listed by."""

    __tablename__ = "agent_labels"
    __table_args__ = (Index("ix_agent_labels_key_value", "key", "value"),)

    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class AgentNic(Base):
    __tablename__ = "agent_nics"
    __table_args__ = (UniqueConstraint("agent_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_id: Mapped[str] = _fk("agents.id")
    name: Mapped[str] = mapped_column(String(NAME))
    address: Mapped[str] = mapped_column(String(64))
    speed_bps: Mapped[int] = mapped_column(BigInteger)

    agent: Mapped[Agent] = relationship(back_populates="nics")


class AgentVolume(Base):
    __tablename__ = "agent_volumes"
    __table_args__ = (UniqueConstraint("agent_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    agent_id: Mapped[str] = _fk("agents.id")
    name: Mapped[str] = mapped_column(String(NAME))
    path: Mapped[str | None] = mapped_column(String(4096))
    iqn: Mapped[str | None] = mapped_column(String(223))
    lun: Mapped[int | None]
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    block_size: Mapped[int]
    portal: Mapped[str | None] = mapped_column(String(262))  # HOST:PORT serving iqn/lun
    # naa. + 32 hex digits: the device the agent reported for it at registration
    # (None for volumes registered before the coordinator asked)
    device_id: Mapped[str | None] = mapped_column(String(37))

    agent: Mapped[Agent] = relationship(back_populates="volumes")


class VolumeSet(Base):
    __tablename__ = "volume_sets"

    id: Mapped[str] = _id()
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    stripe_unit: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    members: Mapped[list[VolumeSetMember]] = relationship(
        cascade="all, delete-orphan", order_by="VolumeSetMember.position"
    )


class VolumeSetMember(Base):
    __tablename__ = "volume_set_members"
    __table_args__ = (UniqueConstraint("volume_set_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    volume_set_id: Mapped[str] = _fk("volume_sets.id")
    position: Mapped[int]
    volume_id: Mapped[int] = _fk("agent_volumes.id", ondelete="RESTRICT")

    volume: Mapped[AgentVolume] = relationship()


class Link(Base):
    __tablename__ = "links"

    id: Mapped[str] = _id()
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    agent_a_id: Mapped[str] = _fk("agents.id", ondelete="RESTRICT")
    nic_a: Mapped[str] = mapped_column(String(NAME))
    agent_b_id: Mapped[str] = _fk("agents.id", ondelete="RESTRICT")
    nic_b: Mapped[str] = mapped_column(String(NAME))
    capacity_bps: Mapped[int] = mapped_column(BigInteger)
    rtt_ms: Mapped[float]
    source: Mapped[str] = mapped_column(String(16))
    bottleneck: Mapped[str | None] = mapped_column(String(NAME), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # the last probe (``probe.py``): running/completed/failed, its iperf3 runs, and the
    # recommendation of the last completed one (kept when a later probe fails)
    probe_state: Mapped[str | None] = mapped_column(String(16), default=None)
    probe_error: Mapped[str | None] = mapped_column(String(4096), default=None)
    probe_started_at: Mapped[datetime | None] = mapped_column(default=None)
    probe_finished_at: Mapped[datetime | None] = mapped_column(default=None)
    probe_measurements: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    recommended_streams: Mapped[int | None] = mapped_column(default=None)
    recommended_pacing: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    recommended_at: Mapped[datetime | None] = mapped_column(default=None)


class Transfer(Base):
    __tablename__ = "transfers"

    id: Mapped[str] = _id()
    source_set_id: Mapped[str] = _fk("volume_sets.id", ondelete="RESTRICT")
    dest_set_id: Mapped[str] = _fk("volume_sets.id", ondelete="RESTRICT")
    streams_per_pair: Mapped[int]
    pacing_policy: Mapped[str] = mapped_column(String(16))
    pacing_margin: Mapped[float]
    multilink: Mapped[str] = mapped_column(String(8), default="paths", server_default="paths")
    congestion: Mapped[str | None] = mapped_column(String(16))
    equalizer: Mapped[bool]
    verify: Mapped[bool]
    verification: Mapped[str] = mapped_column(
        String(8), default="storage", server_default="storage"
    )
    state: Mapped[str] = mapped_column(String(16), index=True)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    done_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(String(4096))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # what the transfer took from its links' probes (``probe.apply_recommendation``)
    recommendation_applied: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    # when it first ran and when it completed; when it last began running (created,
    # resumed) and its done_bytes then: the rate since is what the API reports
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    completed_at: Mapped[datetime | None] = mapped_column(default=None)
    running_since: Mapped[datetime | None] = mapped_column(default=None)
    running_since_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # the Idempotency-Key it was created with, and the SHA-256 of that request's body
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True, default=None)
    request_digest: Mapped[str | None] = mapped_column(String(64), default=None)

    paths: Mapped[list[TransferPath]] = relationship(
        cascade="all, delete-orphan", order_by="TransferPath.position"
    )
    legs: Mapped[list[TransferLeg]] = relationship(
        cascade="all, delete-orphan", order_by="TransferLeg.index"
    )
    events: Mapped[list[TransferEvent]] = relationship(
        cascade="all, delete-orphan", order_by="TransferEvent.id"
    )
    label_rows: Mapped[list[TransferLabel]] = relationship(
        cascade="all, delete-orphan", order_by="TransferLabel.key", lazy="selectin"
    )

    @property
    def labels(self) -> dict[str, str]:
        return {row.key: row.value for row in self.label_rows}


class TransferLabel(Base):
    """A label of a transfer (``key=value``): set at creation or by PATCH, listed by."""

    __tablename__ = "transfer_labels"
    __table_args__ = (Index("ix_transfer_labels_key_value", "key", "value"),)

    transfer_id: Mapped[str] = mapped_column(
        ForeignKey("transfers.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class TransferPath(Base):
    __tablename__ = "transfer_paths"
    __table_args__ = (UniqueConstraint("transfer_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    position: Mapped[int]
    link_id: Mapped[str] = _fk("links.id", ondelete="RESTRICT")


class TransferLeg(Base):
    __tablename__ = "transfer_legs"
    __table_args__ = (UniqueConstraint("transfer_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    index: Mapped[int]
    source_volume_id: Mapped[int] = _fk("agent_volumes.id", ondelete="RESTRICT")
    dest_volume_id: Mapped[int] = _fk("agent_volumes.id", ondelete="RESTRICT")
    bytes: Mapped[int] = mapped_column(BigInteger)
    streams: Mapped[int]
    link_ids: Mapped[list[Any]]
    state: Mapped[str] = mapped_column(String(16))
    # the agent copy that carries this leg (legs of one source member striped over
    # several destination members share one copy) and what the agent last said of it
    copy_id: Mapped[str | None] = mapped_column(String(80))
    copy_state: Mapped[str | None] = mapped_column(String(16))
    done_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(String(4096))
    summary: Mapped[dict[str, Any] | None]

    source_volume: Mapped[AgentVolume] = relationship(foreign_keys=[source_volume_id])
    dest_volume: Mapped[AgentVolume] = relationship(foreign_keys=[dest_volume_id])


class TransferEvent(Base):
    __tablename__ = "transfer_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str | None] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(String(4096), default="")


class StreamSample(Base):
    """One stream's telemetry over one sampling interval (the agent's ``stream``
    records, iperf3 names and units), collected by ``telemetry.py``; old rows are
    merged into coarser ones (``telemetry_rollup.py``), and the oldest dropped beyond
    ``telemetry.MAX_ROWS_PER_TRANSFER``."""

    __tablename__ = "stream_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    leg: Mapped[int]  # index of the first leg of the agent copy carrying the stream
    copy_id: Mapped[str] = mapped_column(String(80))
    stream: Mapped[str] = mapped_column(String(32))
    path: Mapped[str | None] = mapped_column(String(NAME))
    time: Mapped[float] = mapped_column(Float)  # Unix seconds at the interval's end
    bits_per_second: Mapped[float | None] = mapped_column(Float)
    snd_cwnd: Mapped[int | None] = mapped_column(BigInteger)  # bytes
    rtt: Mapped[int | None] = mapped_column(BigInteger)  # microseconds
    rttvar: Mapped[int | None] = mapped_column(BigInteger)  # microseconds
    retransmits: Mapped[int | None] = mapped_column(BigInteger)  # in the interval
    cap: Mapped[int | None] = mapped_column(BigInteger)  # cwnd cap in segments, if any
    # shares of the interval (0-1): data in flight or queued (counting the two stalls),
    # stalled on the receiver's window, stalled on the send buffer (TCP_INFO chronographs)
    busy: Mapped[float | None] = mapped_column(Float)
    rwnd_limited: Mapped[float | None] = mapped_column(Float)
    sndbuf_limited: Mapped[float | None] = mapped_column(Float)
    # seconds this row stands for: the agent's interval, or the intervals of the samples
    # merged into it further back (telemetry_rollup.py); None: one agent interval
    span: Mapped[float | None] = mapped_column(Float)


class NicPacingRate(Base):
    """A NIC pacing rate in force for a transfer, as its source agent reports it
    (``caps.requested.nic_pacing_rates`` of the agent copy)."""

    __tablename__ = "nic_pacing_rates"
    __table_args__ = (UniqueConstraint("transfer_id", "agent_id", "nic"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    agent_id: Mapped[str] = _fk("agents.id")
    nic: Mapped[str] = mapped_column(String(NAME))
    rate: Mapped[int] = mapped_column(BigInteger)  # bytes/s
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class CampaignRun(Base):
    """A run of a campaign (campaigns/): started here (``origin`` api, its runner a
    child process writing into ``out_dir``, watched by ``campaign_watch.py``) or
    imported from a run elsewhere (``origin`` import). ``results`` is the runner's
    results.json (the runs so far while it runs), ``summary`` its summary rows."""

    __tablename__ = "campaign_runs"

    id: Mapped[str] = _id()
    campaign: Mapped[str] = mapped_column(String(NAME))
    quick: Mapped[bool]
    origin: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    done: Mapped[int] = mapped_column(default=0)
    total: Mapped[int] = mapped_column(default=0)
    scenario: Mapped[str | None] = mapped_column(String(256))
    repetition: Mapped[int | None]
    elapsed_s: Mapped[float | None] = mapped_column(Float)
    eta_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(String(4096))
    pid: Mapped[int | None]
    exit_code: Mapped[int | None]
    out_dir: Mapped[str | None] = mapped_column(String(4096))
    run_id: Mapped[str | None] = mapped_column(String(128))  # the results' run_id
    results_at: Mapped[datetime | None]
    results: Mapped[dict[str, Any] | None] = mapped_column(deferred=True)
    summary: Mapped[dict[str, Any] | None]  # summary rows and a few facts of the results


class CoordinatorLease(Base):
    """Which coordinator leads (``leadership.py``): one row per lease, ``name`` leader.
    Times are seconds since the epoch by the database's clock, so coordinators on
    hosts whose clocks differ agree on when a lease has run out."""

    __tablename__ = "coordinator_leases"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(NAME), default="")  # "" nobody
    url: Mapped[str | None] = mapped_column(String(2048))  # where the holder serves its API
    acquired_at: Mapped[float] = mapped_column(Float, default=0.0)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)


class WebhookDelivery(Base):
    """A notification of a transfer's end to one webhook URL (``webhooks.py``): added in
    the transaction that ends the transfer, sent by the leading coordinator until the
    receiver answers 2xx or the attempts run out."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transfer_id: Mapped[str] = _fk("transfers.id")
    url: Mapped[str] = mapped_column(String(2048))
    event: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    gave_up: Mapped[bool] = mapped_column(default=False)
    last_error: Mapped[str | None] = mapped_column(String(1024), default=None)
