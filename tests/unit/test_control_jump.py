"""Jump start at the agent: the rates a copy's connections start at, from the NIC
pacing of its caps, and the copy manager handing them to the engine."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from test_control_copies import FakeEngine

from reservoir.agent.control import CopyCreate, CopyManager
from reservoir.agent.control.jump import PAYLOAD_PER_FRAME, jump_rates
from reservoir.agent.control.models import NicPublic
from reservoir.agent.initiator import ANY_LOCAL
from reservoir.agent.transfer import CopyOptions


def nic(name: str, *addresses: str) -> NicPublic:
    return NicPublic(
        name=name, addresses=list(addresses), speed_bps=None, mtu=1500, up=True, loopback=False
    )


def test_each_address_of_a_paced_nic_starts_at_its_streams_part_of_the_rate() -> None:
    nics = [nic("eth1", "10.1.0.1", "fd00::1"), nic("eth2", "10.2.0.1"), nic("eth3", "10.3.0.1")]
    rates = jump_rates({"eth1": 118_750_000, "eth2": 62_500_000}, {"eth1": 16, "eth2": 4}, nics)
    eth1 = int(118_750_000 * PAYLOAD_PER_FRAME) // 16
    eth2 = int(62_500_000 * PAYLOAD_PER_FRAME) // 4
    assert rates == {"10.1.0.1": eth1, "fd00::1": eth1, "10.2.0.1": eth2}  # eth3: not paced


def test_with_one_paced_nic_connections_without_a_local_address_start_at_its_rate() -> None:
    rates = jump_rates({"eth1": 125_000_000}, {"eth1": 8}, [nic("eth1", "10.1.0.1")])
    share = int(125_000_000 * PAYLOAD_PER_FRAME) // 8
    assert rates == {"10.1.0.1": share, ANY_LOCAL: share}


class Starter:
    def jump_start(self, sock: socket.socket, remote: tuple[str, int], rate: int) -> bytes:
        raise AssertionError("the manager only hands the starter to the engine")

    def withdraw_start(self, key: bytes) -> None:
        raise AssertionError("the manager only hands the starter to the engine")


def run_one(tmp_path: Path, starter: Starter | None, caps: dict[str, object] | None) -> CopyOptions:
    async def main() -> CopyOptions:
        engine = FakeEngine(block=False)
        manager = CopyManager(tmp_path, copy_fn=engine)
        manager.starter = starter
        body: dict[str, object] = {"source": "/src.img", "dest": "/dst.img", "streams": 8}
        if caps is not None:
            body["caps"] = caps
        job = manager.create(CopyCreate.model_validate(body))
        for _ in range(200):
            if engine.calls:
                break
            await asyncio.sleep(0.01)
        await manager.close()
        assert engine.calls, f"the copy never ran: {job.state}"
        return engine.calls[0]

    return asyncio.run(main())


def test_a_copy_paced_on_a_nic_runs_with_the_rates_of_its_addresses(tmp_path: Path) -> None:
    starter = Starter()
    options = run_one(tmp_path, starter, {"nic_pacing_rates": {"lo": 125_000_000}})
    assert options.jump is not None and options.jump.starter is starter
    share = int(125_000_000 * PAYLOAD_PER_FRAME) // 8  # 8 streams dealt over one NIC
    assert options.jump.rates["127.0.0.1"] == share


def test_no_jump_start_without_nic_pacing_or_without_a_starter(tmp_path: Path) -> None:
    assert run_one(tmp_path / "a", Starter(), None).jump is None
    assert run_one(tmp_path / "b", Starter(), {"stream_pacing_rates": {0: 1000}}).jump is None
    assert run_one(tmp_path / "c", None, {"nic_pacing_rates": {"lo": 125_000_000}}).jump is None
