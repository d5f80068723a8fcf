"""A session for tests of what keeps and hands out sessions (the pool of warm
sessions, a copy's remote side): it answers every SCSI command GOOD and records it,
answers pings unless told not to, and counts its logouts."""

from __future__ import annotations

from reservoir.agent.initiator import RecoveryPolicy, ScsiReply


class FakeTransport:
    def __init__(self) -> None:
        self.dropped = False

    def drop(self) -> None:
        self.dropped = True


class FakeSession:
    def __init__(self, name: str = "s", *, answers: bool = True) -> None:
        self.name = name
        self.answers = answers  # pings answered
        self.connected = True
        self.busy = False  # a command outstanding
        self.logouts = 0
        self.pings = 0
        self.cdbs: list[bytes] = []
        self.attention_expected = False  # as a Session's: cleared by its next command
        self.learned: dict[tuple[str, int], bool] = {}  # as a Session's: of its login
        self.reinstatements = 0  # as a Session's: logins again during the copy
        self.recovery: RecoveryPolicy | None = None
        self.transport: FakeTransport | None = FakeTransport()

    def __repr__(self) -> str:
        return f"FakeSession({self.name})"

    @property
    def reusable(self) -> bool:
        return self.connected and not self.busy and self.logouts == 0

    def reuse(self, recovery: RecoveryPolicy | None = None) -> None:
        self.recovery = recovery

    async def ping(self, timeout: float = 10.0) -> None:
        self.pings += 1
        if not self.answers:
            raise TimeoutError

    async def scsi(
        self,
        lun: int,
        cdb: bytes,
        data_out: bytes | memoryview = b"",
        read_length: int = 0,
        timeout: float | None = None,
    ) -> ScsiReply:
        self.cdbs.append(bytes(cdb))
        self.attention_expected = False
        return ScsiReply(0, bytes(read_length), b"")

    async def close(self) -> None:
        self.logouts += 1
        self.connected = False
