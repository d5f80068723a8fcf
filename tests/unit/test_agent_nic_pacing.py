"""The agent's NIC pacing: running copies' rates summed per NIC, applied and removed
through a recording backend; the copy manager pacing while a copy runs, and only then."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_control_copies import FakeEngine, request, run, settle, started

from reservoir.agent.control import CopyManager
from reservoir.agent.control.copies import flows_per_nic
from reservoir.agent.control.models import CapsBase, CopyCreate
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.pacing.nic import Applied, DeviceNotFoundError


class Backend:
    """Stands for reservoir.pacing.nic: what is installed per NIC, every call recorded."""

    def __init__(self, missing: frozenset[str] = frozenset()) -> None:
        self.installed: dict[str, int] = {}  # NIC -> bit/s
        self.calls: list[tuple[str, str, int]] = []
        self.flows: dict[str, int] = {}  # NIC -> flows of its last apply
        self.kind = "tbf"
        self.missing = missing
        self.stale: list[Applied] = []

    def apply(self, ifname: str, rate_bps: int, *, flows: int, state_dir: Path) -> Applied:
        self.calls.append(("apply", ifname, rate_bps))
        self.flows[ifname] = flows
        if ifname in self.missing:
            raise DeviceNotFoundError(f"no device {ifname}")
        assert ifname not in self.installed, "applied over an installed qdisc"
        self.installed[ifname] = rate_bps
        return applied(ifname, rate_bps, state_dir, self.kind, flows if self.kind == "fq" else 1)

    def remove(self, a: Applied) -> bool:
        self.calls.append(("remove", a.ifname, a.rate_bps))
        return self.installed.pop(a.ifname, None) is not None

    def cleanup_stale(self, state_dir: Path) -> list[Applied]:
        gone, self.stale = self.stale, []
        return gone


def applied(
    ifname: str, rate_bps: int, state_dir: Path, kind: str = "tbf", flows: int = 1
) -> Applied:
    return Applied(
        ifname=ifname,
        netns=None,
        ifindex=2,
        kind=kind,
        flows=flows,
        handle=0x52530000,
        rate_bps=rate_bps,
        burst_bytes=3028,
        limit_bytes=262144,
        previous_kind="noqueue",
        previous_handle=0,
        owner_pid=1,
        owner_start=1,
        state_file=str(state_dir / f"root-if{ifname}.json"),
    )


def test_copies_pacing_one_nic_add_up_and_the_rest_goes_when_they_stop(tmp_path: Path) -> None:
    backend = Backend()
    pacer = NicPacer(tmp_path, backend)
    pacer.set("c1", {"eth1": 50_000_000, "eth2": 25_000_000})
    pacer.flush()
    assert backend.installed == {"eth1": 400_000_000, "eth2": 200_000_000}
    pacer.set("c2", {"eth1": 10_000_000})
    pacer.flush()
    assert backend.installed == {"eth1": 480_000_000, "eth2": 200_000_000}
    pacer.clear("c1")
    pacer.flush()
    assert backend.installed == {"eth1": 80_000_000}
    pacer.close()
    assert backend.installed == {}


def test_an_unchanged_rate_is_not_reinstalled(tmp_path: Path) -> None:
    backend = Backend()
    pacer = NicPacer(tmp_path, backend)
    pacer.set("c1", {"eth1": 1_000_000})
    pacer.set("c1", {"eth1": 1_000_000})
    pacer.flush()
    assert backend.calls == [("apply", "eth1", 8_000_000)]
    pacer.close()


def test_a_nic_that_cannot_be_paced_is_reported_and_the_others_are_paced(
    tmp_path: Path,
) -> None:
    backend = Backend(missing=frozenset({"eth9"}))
    pacer = NicPacer(tmp_path, backend)
    pacer.set("c1", {"eth1": 1_000_000, "eth9": 1_000_000})
    pacer.flush()
    assert backend.installed == {"eth1": 8_000_000}
    assert "no device eth9" in pacer.errors["eth9"]
    text = pacer.describe({"eth1": 1_000_000, "eth9": 1_000_000})
    assert "eth1 at 8.0 Mbit/s with tbf" in text and "eth9 not paced: no device eth9" in text
    pacer.clear("c1")
    pacer.flush()
    assert pacer.errors == {}
    pacer.close()


def test_start_removes_what_a_dead_agent_left(tmp_path: Path) -> None:
    backend = Backend()
    backend.stale = [applied("eth1", 1_000_000, tmp_path)]
    pacer = NicPacer(tmp_path / "pacing", backend)
    pacer.start()
    pacer.close()
    assert backend.stale == [] and (tmp_path / "pacing").is_dir()


def test_a_copy_paces_its_nics_while_it_runs_and_not_after(tmp_path: Path) -> None:
    async def main() -> None:
        backend = Backend()
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        manager.pacer = NicPacer(tmp_path / "pacing", backend)
        caps = CapsBase(nic_pacing_rates={"eth1": 1_000_000})
        job = manager.create(request(streams=2, caps=caps.model_dump()))
        await started(manager, job.id)
        manager.pacer.flush()
        assert backend.installed == {"eth1": 8_000_000}
        assert backend.flows == {"eth1": 2}  # its two streams leave through eth1
        manager.set_caps(job.id, CapsBase(nic_pacing_rates={"eth1": 2_000_000}))
        manager.pacer.flush()
        assert backend.installed == {"eth1": 16_000_000}
        engine.release.set()
        await settle(manager, job.id)
        manager.pacer.close()
        assert backend.installed == {}

    run(main())


def test_caps_given_at_create_apply_from_the_first_connection(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        caps = CapsBase(stream_pacing_rates={1: 5_000_000})
        job = manager.create(request(streams=2, caps=caps.model_dump()))
        await started(manager, job.id)
        live = engine.calls[-1].stream_caps
        assert live is not None and live.pacing == {1: 5_000_000}
        await manager.cancel(job.id)
        await asyncio.sleep(0)

    run(main())


def test_the_plan_s_streams_per_nic_override_the_even_deal(tmp_path: Path) -> None:
    async def main() -> None:
        backend = Backend()
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        manager.pacer = NicPacer(tmp_path / "pacing", backend)
        caps = CapsBase(
            nic_pacing_rates={"eth1": 3_000_000, "eth2": 1_000_000},
            nic_pacing_flows={"eth1": 3, "eth2": 1},  # 4 streams dealt 3:1 by capacity
        )
        job = manager.create(request(streams=4, caps=caps.model_dump()))
        await started(manager, job.id)
        manager.pacer.flush()
        assert backend.flows == {"eth1": 3, "eth2": 1}  # not 2 and 2: eth1 would pass its rate
        await manager.cancel(job.id)
        manager.pacer.close()

    run(main())


@pytest.mark.parametrize(
    ("flows", "message"),
    [({"eth9": 2}, "names 'eth9', which has no pacing rate"), ({"eth1": 0}, "between 1 and")],
)
def test_flows_of_an_unpaced_nic_or_out_of_range_are_refused(
    flows: dict[str, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CapsBase(nic_pacing_rates={"eth1": 1_000_000}, nic_pacing_flows=flows)


def test_fq_is_paced_for_the_streams_of_every_copy_that_shares_the_nic(tmp_path: Path) -> None:
    backend = Backend()
    backend.kind = "fq"
    pacer = NicPacer(tmp_path, backend)
    pacer.set("c1", {"eth1": 4_000_000}, {"eth1": 4})
    pacer.flush()
    assert backend.flows == {"eth1": 4}
    pacer.set("c2", {"eth1": 2_000_000}, {"eth1": 2})
    pacer.flush()
    assert backend.installed == {"eth1": 48_000_000} and backend.flows == {"eth1": 6}
    pacer.set("c2", {"eth1": 2_000_000}, {"eth1": 4})  # the same rate over more streams
    pacer.flush()
    assert backend.flows == {"eth1": 8}  # reinstalled: each flow's share is smaller
    pacer.clear("c2")
    pacer.flush()
    assert backend.installed == {"eth1": 32_000_000} and backend.flows == {"eth1": 4}
    pacer.close()


def test_a_token_bucket_is_not_reinstalled_when_only_the_streams_change(tmp_path: Path) -> None:
    backend = Backend()
    pacer = NicPacer(tmp_path, backend)
    pacer.set("c1", {"eth1": 1_000_000}, {"eth1": 2})
    pacer.set("c1", {"eth1": 1_000_000}, {"eth1": 8})
    pacer.flush()
    assert [c[0] for c in backend.calls] == ["apply"]  # tbf caps the sum: flows do not matter
    pacer.close()


@pytest.mark.parametrize(
    ("streams", "dests", "nics", "flows"),
    [(4, 1, ["eth1"], 4), (4, 2, ["eth1"], 8), (5, 1, ["eth1", "eth2"], 3), (1, 1, ["a", "b"], 1)],
)
def test_a_copy_s_streams_are_dealt_over_the_nics_it_paces_rounded_up(
    streams: int, dests: int, nics: list[str], flows: int
) -> None:
    dest = [f"/tmp/d{i}" for i in range(dests)]
    req = CopyCreate(
        source="/tmp/s", dest=dest if dests > 1 else dest[0], streams=streams,
        stripe_unit=1 << 20 if dests > 1 else None,
    )  # fmt: skip
    assert flows_per_nic(req, nics) == dict.fromkeys(nics, flows)
