"""The scheduler against a fake agent client: legs to copy requests, and reconciling
the database with what the agents say (start, progress, pause, failures, restarts)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_volumes import FakeVolumes
from sqlalchemy import select
from test_server_api import InProcess

from reservoir.server import AgentScheduler, ServerSettings, create_app
from reservoir.server.app import db
from reservoir.server.app.agent_client import (
    AgentRef,
    AgentRefusedError,
    AgentUnreachableError,
    HttpAgentClient,
)
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.tables import Transfer
from reservoir.server.domain import leg_retry
from reservoir.server.domain import scheduler as scheduler_module
from reservoir.server.domain.legs import SUPPORTED_LAYOUTS

USER = "unit-user-token-0123456789abcdef"
MiB = 1 << 20
Json = dict[str, Any]
IQN = "iqn.2026-11.org.reservoir:{}"


class FakeAgents:
    """Stands for the agents' control API: copies per (agent, id), calls recorded."""

    def __init__(self) -> None:
        self.copies: dict[tuple[str, str], Json] = {}
        self.calls: list[tuple[str, str, str]] = []  # (agent, verb, copy id)
        self.down: set[str] = set()

    def _reach(self, agent: AgentRef) -> None:
        if agent.name in self.down:
            raise AgentUnreachableError(f"agent {agent.name!r}: connection refused")

    async def create_copy(self, agent: AgentRef, body: Json) -> Json:
        self._reach(agent)
        self.calls.append((agent.name, "create", body["id"]))
        copy = {**body, "state": "running", "progress": {"done_bytes": 0}, "last_error": None}
        self.copies[agent.name, body["id"]] = copy
        return copy

    async def get_copy(self, agent: AgentRef, copy_id: str) -> Json | None:
        self._reach(agent)
        return self.copies.get((agent.name, copy_id))

    async def copy_action(self, agent: AgentRef, copy_id: str, action: str) -> Json:
        self._reach(agent)
        self.calls.append((agent.name, action, copy_id))
        copy = self.copies[agent.name, copy_id]
        if action == "pause" and copy["state"] == "completed":
            raise AgentRefusedError(409, "it completed")
        copy["state"] = {"pause": "paused", "resume": "running", "cancel": "cancelled"}[action]
        return copy

    async def wait_copy(
        self, agent: AgentRef, copy_id: str, state: str, seconds: float
    ) -> Json | None:
        self._reach(agent)  # the copy as it is: a pass polls it again
        return self.copies.get((agent.name, copy_id))

    async def aclose(self) -> None:
        return None

    def finish(self, agent: str, copy_id: str, skipped: int = 0) -> None:
        copy = self.copies[agent, copy_id]
        length = copy["range"]["length"]
        copy.update(state="completed", progress={"done_bytes": length})
        copy["summary"] = {"skipped_extents": skipped, "skipped_bytes": 0, "resent_bytes": 0}


class World:
    """A coordinator app in process with an :class:`AgentScheduler` on a fake client."""

    def __init__(self, database_url: str) -> None:
        settings = ServerSettings(
            database_url=database_url,
            user_tokens=[USER],  # type: ignore[list-item]
        )
        self.engine = db.make_engine(settings.database_url)
        db.upgrade(self.engine)
        self.agents = FakeAgents()
        self.volumes = FakeVolumes()  # what the agents report at registration
        self.sessions = db.make_sessions(self.engine)
        self.scheduler = AgentScheduler(self.sessions, self.agents, interval=0.01)
        app = create_app(
            settings, engine=self.engine, scheduler=self.scheduler, volume_lister=self.volumes
        )
        self.api = httpx.Client(
            transport=InProcess(app),
            base_url="http://server/api/v1",
            headers={"Authorization": f"Bearer {USER}"},
        )

    def ok(self, r: httpx.Response, code: int = 201) -> Json:
        assert r.status_code == code, r.text
        data: Json = r.json()
        return data

    def agent(self, name: str, *, luns: int = 0, files: int = 0, size: int = 16 * MiB) -> Json:
        vols: list[Json] = [
            {"name": f"f{i}", "path": f"/srv/{name}-{i}.img", "size_bytes": size}
            for i in range(files)
        ]
        vols += [
            {
                "name": f"l{i}",
                "iqn": IQN.format(name),
                "lun": i,
                "size_bytes": size,
                **({"portal": "127.0.0.1:3261"} if name.endswith("p") else {}),
            }
            for i in range(luns)
        ]
        body = {
            "name": name,
            "control_url": f"http://{name}:8740",
            "nics": [{"name": "eth0", "address": f"10.0.0.{len(name)}", "speed_bps": 10**10}],
            "volumes": vols,
        }
        return self.register(body)

    def register(self, body: Json) -> Json:
        """``POST /agents`` of an agent that reports the volumes of ``body``."""
        return self.ok(self.api.post("/agents", json=self.volumes.has(body)))

    def vset(self, name: str, members: list[tuple[Json, str]], unit: int = MiB) -> Json:
        body = {
            "name": name,
            "members": [{"agent_id": a["id"], "volume": v} for a, v in members],
            "stripe_unit": unit,
        }
        return self.ok(self.api.post("/volume-sets", json=body))

    def transfer(self, src: Json, dst: Json, **kw: Any) -> httpx.Response:
        body = {"source": src["id"], "destination": dst["id"], "streams_per_pair": 2, **kw}
        return self.api.post("/transfers", json=body)

    def get(self, tid: str) -> Json:
        return self.ok(self.api.get(f"/transfers/{tid}"), 200)

    def events(self, tid: str) -> list[str]:
        history: list[Json] = self.api.get(f"/transfers/{tid}/events").json()
        return [e["detail"] for e in history]

    def tick(self) -> None:
        asyncio.run(self.scheduler.tick())

    def close(self) -> None:
        self.api.close()
        self.engine.dispose()


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    w = World(database_url)
    yield w
    w.close()


def two_by_two(w: World, **kw: Any) -> Json:
    """Two source files on agent A, two LUNs on agent B (portal given), a link A-B."""
    a, b = w.agent("a", files=2), w.agent("bp", luns=2)
    src = w.vset("src", [(a, "f0"), (a, "f1")])
    dst = w.vset("dst", [(b, "l0"), (b, "l1")])
    link = {
        "name": "ab",
        "agent_a": a["id"],
        "nic_a": "eth0",
        "agent_b": b["id"],
        "nic_b": "eth0",
        "capacity_bps": 10**10,
        "rtt_ms": 1,
    }
    lid = w.ok(w.api.post("/links", json=link))["id"]
    return w.ok(w.transfer(src, dst, paths=[lid], **kw))


# ---------------------------------------------------------------- legs to copy requests


def test_same_layout_gives_one_copy_per_leg_with_the_lun_url_and_paths(world: World) -> None:
    t = two_by_two(world)
    world.tick()
    requests = sorted(world.agents.copies.values(), key=lambda c: c["id"])
    assert [(c["id"], c["source"], c["dest"]) for c in requests] == [
        (f"{t['id']}-leg0", "/srv/a-0.img", f"iscsi://127.0.0.1:3261/{IQN.format('bp')}/0"),
        (f"{t['id']}-leg1", "/srv/a-1.img", f"iscsi://127.0.0.1:3261/{IQN.format('bp')}/1"),
    ]
    first = requests[0]
    assert first["range"] == {"offset": 0, "length": 16 * MiB}
    assert first["paths"] == ["10.0.0.1=10.0.0.2:3261"]
    assert (first["streams"], first["verify"], first["extent_size"]) == (2, True, MiB)
    assert "stripe_unit" not in first


def test_an_mptcp_transfer_asks_for_mptcp_sockets_and_binds_no_path(world: World) -> None:
    t = two_by_two(world, multilink="mptcp")
    assert t["multilink"] == "mptcp"
    world.tick()
    for c in world.agents.copies.values():
        assert c["mptcp"] is True
        assert "paths" not in c
        assert c["dest"].startswith("iscsi://127.0.0.1:3261/")  # the LUN's portal


def test_a_transfer_is_over_paths_unless_it_asks_for_mptcp(world: World) -> None:
    t = two_by_two(world)
    assert (t["multilink"], t["congestion"]) == ("paths", None)
    world.tick()
    assert all("mptcp" not in c and "congestion" not in c for c in world.agents.copies.values())
    bad = world.api.post(
        "/transfers", json={"source": "a", "destination": "b", "multilink": "bond"}
    )
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["loc"] == ["body", "multilink"]


def test_the_transfers_congestion_control_goes_to_every_copy(world: World) -> None:
    t = two_by_two(world, congestion="cubic")
    assert t["congestion"] == "cubic"
    world.tick()
    assert {c["congestion"] for c in world.agents.copies.values()} == {"cubic"}
    bad = world.api.post(
        "/transfers", json={"source": "a", "destination": "b", "congestion": "x y"}
    )
    assert bad.status_code == 422


def test_a_receipt_transfer_is_stored_shown_and_asks_every_copy_for_receipts(
    world: World,
) -> None:
    t = two_by_two(world, verification="receipt")
    assert t["verification"] == "receipt"
    assert world.get(t["id"])["verification"] == "receipt"
    with world.sessions() as session:
        assert session.get(Transfer, t["id"]).verification == "receipt"  # type: ignore[union-attr]
    world.tick()
    assert {c["verification"] for c in world.agents.copies.values()} == {"receipt"}


def test_a_storage_transfer_leaves_the_agents_default_and_unknown_modes_are_422(
    world: World,
) -> None:
    t = two_by_two(world)
    assert t["verification"] == "storage"
    world.tick()
    assert all("verification" not in c for c in world.agents.copies.values())
    bad = world.api.post(
        "/transfers", json={"source": "a", "destination": "b", "verification": "read-back"}
    )
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["loc"] == ["body", "verification"]


def test_more_destination_members_stripe_each_source_member_in_deal_order(world: World) -> None:
    a = world.agent("a", files=2, size=32 * MiB)
    bs = [world.agent(f"b{i}", luns=1) for i in range(4)]
    src = world.vset("src", [(a, "f0"), (a, "f1")])
    dst = world.vset("dst", [(b, "l0") for b in bs])
    t = world.ok(world.transfer(src, dst))
    world.tick()
    copies = sorted(world.agents.copies.values(), key=lambda c: c["id"])
    url = "iscsi://10.0.0.2:3260/{}/0"  # no portal: the agent's first NIC, port 3260
    assert [c["dest"] for c in copies] == [
        [url.format(IQN.format("b0")), url.format(IQN.format("b2"))],
        [url.format(IQN.format("b1")), url.format(IQN.format("b3"))],
    ]
    assert all(c["stripe_unit"] == MiB and "paths" not in c for c in copies)
    assert [c["range"]["length"] for c in copies] == [32 * MiB, 32 * MiB]
    legs = world.get(t["id"])["legs"]
    assert len(legs) == 4 and len({leg["copy_id"] for leg in legs}) == 2


@pytest.mark.parametrize(
    ("dest_members", "unit", "why"),
    [(3, MiB, "3 destination members for 2 source members"), (2, 2 * MiB, "stripe units differ")],
)
def test_layouts_the_engine_cannot_express_are_422(
    world: World, dest_members: int, unit: int, why: str
) -> None:
    a = world.agent("a", files=2)
    b = world.agent("b", luns=3)
    src = world.vset("src", [(a, "f0"), (a, "f1")])
    dst = world.vset("dst", [(b, f"l{i}") for i in range(dest_members)], unit=unit)
    r = world.transfer(src, dst)
    assert r.status_code == 422
    detail = r.json()["errors"][0]
    assert detail["loc"] == ["body", "destination"]
    assert why in detail["msg"] and SUPPORTED_LAYOUTS in detail["msg"]


def test_a_destination_not_served_over_iscsi_is_422(world: World) -> None:
    a, b = world.agent("a", files=1), world.agent("b", files=1)
    r = world.transfer(world.vset("src", [(a, "f0")]), world.vset("dst", [(b, "f0")]))
    assert r.status_code == 422
    assert "needs iqn and lun" in r.json()["errors"][0]["msg"]


# ---------------------------------------------------------------- reconciliation


def test_legs_start_run_and_complete_with_progress_and_events(world: World) -> None:
    t = two_by_two(world)
    tid = t["id"]
    world.tick()
    running = world.get(tid)
    assert running["state"] == "running"
    assert [leg["state"] for leg in running["legs"]] == ["running", "running"]
    world.agents.copies["a", f"{tid}-leg0"]["progress"] = {"done_bytes": 5 * MiB}
    world.agents.finish("a", f"{tid}-leg1")
    world.tick()
    mid = world.get(tid)
    assert mid["done_bytes"] == 21 * MiB and mid["state"] == "running"
    assert [leg["state"] for leg in mid["legs"]] == ["running", "completed"]
    world.agents.finish("a", f"{tid}-leg0")
    world.tick()
    done = world.get(tid)
    assert done["state"] == "completed" and done["done_bytes"] == 32 * MiB
    assert done["legs"][0]["summary"]["skipped_extents"] == 0
    assert "complete: every leg completed" in world.events(tid)
    creates = [c for c in world.agents.calls if c[1] == "create"]
    assert len(creates) == 2


def test_a_legs_completed_event_says_how_it_was_verified_and_when_it_was_not_held(
    world: World,
) -> None:
    tid = two_by_two(world)["id"]
    world.tick()
    lapse = "destination LUN 0 of iqn.x: not held from 1.20 s to 4.50 s (the target restarted)"
    summaries = {
        0: {"verified": True, "mode": "storage", "hold_lapses": [lapse]},
        1: {"verified": False, "mode": ""},
    }
    for leg, extra in summaries.items():
        world.agents.finish("a", f"{tid}-leg{leg}")
        world.agents.copies["a", f"{tid}-leg{leg}"]["summary"].update(extra)
    world.tick()
    said = {e.split(" completed ")[0]: e for e in world.events(tid) if " completed (" in e}
    assert said["leg 0"].startswith("leg 0 completed (16777216 bytes), verified (storage):")
    assert said["leg 0"].endswith(
        f"; {lapse}: other initiators could write the destination then "
        "(the end check hashed all of it after)"
    )
    assert said["leg 1"].startswith("leg 1 completed (16777216 bytes), not verified:")
    assert "not held" not in said["leg 1"]


def test_each_event_of_a_transfer_is_a_line_of_the_coordinators_log_a_failure_a_warning(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reservoir.server.transfers")
    tid = two_by_two(world)["id"]
    world.tick()
    world.agents.copies["a", f"{tid}-leg0"].update(state="failed", last_error="target gone")
    world.tick()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.INFO, f"transfer {tid}: (new) -> queued: created: 2 legs, {32 * MiB} "
            "bytes from 'src' to 'dst'") in lines  # fmt: skip
    assert (logging.INFO, f"transfer {tid}: started copy {tid}-leg0 on agent 'a'") in lines
    failed = [text for level, text in lines if level == logging.WARNING]
    assert len(failed) == 1 and failed[0].startswith(f"transfer {tid}: running -> failed: ")
    assert "target gone" in failed[0]
    assert len(lines) == len(world.events(tid))


def test_an_unreachable_agent_is_waited_for_with_one_event(world: World) -> None:
    world.agents.down.add("a")
    tid = two_by_two(world)["id"]
    for _ in range(3):
        world.tick()
    assert world.get(tid)["state"] == "queued"
    waiting = [e for e in world.events(tid) if e.startswith("waiting for agent")]
    assert len(waiting) == 1 and "connection refused" in waiting[0]
    world.agents.down.clear()
    world.tick()
    assert world.get(tid)["state"] == "running"
    assert "agent 'a' answers again" in world.events(tid)


def test_pause_resume_cancel_reach_the_agents_copies(world: World) -> None:
    tid = two_by_two(world)["id"]
    world.tick()
    world.ok(world.api.post(f"/transfers/{tid}/pause"), 200)
    world.tick()
    states = {c["id"]: c["state"] for c in world.agents.copies.values()}
    assert set(states.values()) == {"paused"}
    world.tick()  # nothing left to stop: no more calls
    calls = len(world.agents.calls)
    world.tick()
    assert len(world.agents.calls) == calls
    world.ok(world.api.post(f"/transfers/{tid}/resume"), 200)
    world.tick()
    assert {c["state"] for c in world.agents.copies.values()} == {"running"}
    assert world.get(tid)["state"] == "running"
    world.ok(world.api.post(f"/transfers/{tid}/cancel"), 200)
    world.tick()
    assert {c["state"] for c in world.agents.copies.values()} == {"cancelled"}


def test_cancelling_a_failed_transfer_cancels_its_failed_copies_too(world: World) -> None:
    """A failed copy still holds its destination for a resume: cancelling the transfer
    cancels it on its agent, which releases the destination."""
    tid = two_by_two(world)["id"]
    world.tick()
    world.agents.copies["a", f"{tid}-leg0"].update(state="failed", last_error="target gone")
    world.tick()
    world.tick()
    assert world.get(tid)["state"] == "failed"
    world.ok(world.api.post(f"/transfers/{tid}/cancel"), 200)
    world.tick()
    assert ("a", "cancel", f"{tid}-leg0") in world.agents.calls
    assert {c["state"] for c in world.agents.copies.values()} == {"cancelled"}


def test_a_failed_copy_fails_the_transfer_and_pauses_the_others(world: World) -> None:
    tid = two_by_two(world)["id"]
    world.tick()
    copy = world.agents.copies["a", f"{tid}-leg0"]
    copy.update(state="failed", last_error="dest is too small")
    world.tick()
    failed = world.get(tid)
    assert failed["state"] == "failed" and "dest is too small" in failed["last_error"]
    world.tick()
    assert world.agents.copies["a", f"{tid}-leg1"]["state"] == "paused"
    world.ok(world.api.post(f"/transfers/{tid}/resume"), 200)
    world.tick()
    assert world.get(tid)["state"] == "running"
    assert {c["state"] for c in world.agents.copies.values()} == {"running"}


def _unreachable(world: World, copy_id: str) -> None:
    """What the agent says of a copy whose destination's target stopped answering."""
    world.agents.copies["a", copy_id].update(
        state="failed", retryable=True, last_error="every stream failed (connection refused)"
    )


def test_a_copy_failed_for_a_side_it_could_not_reach_is_resumed_and_the_transfer_runs_on(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(leg_retry, "FIRST_DELAY", 0.0)  # resumed on the next pass
    caplog.set_level(logging.INFO, logger="reservoir.server.transfers")
    tid = two_by_two(world)["id"]
    world.tick()
    _unreachable(world, f"{tid}-leg0")
    world.tick()
    waiting = world.get(tid)
    assert waiting["state"] == "running"
    assert waiting["legs"][0]["state"] == "running"  # not failed: retried
    assert "connection refused" in waiting["legs"][0]["last_error"]
    began = [e for e in world.events(tid) if "resuming it in" in e]
    assert len(began) == 1 and "every stream failed (connection refused); resuming" in began[0]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"transfer {tid}: {began[0]}"]  # the failure: a warning in the log
    world.tick()
    assert world.agents.copies["a", f"{tid}-leg0"]["state"] == "running"
    assert f"resumed copy {tid}-leg0 on agent 'a' (retry 1)" in world.events(tid)
    world.tick()
    assert world.get(tid)["legs"][0]["last_error"] is None  # it runs again
    for leg in (0, 1):
        world.agents.finish("a", f"{tid}-leg{leg}")
    world.tick()
    assert world.get(tid)["state"] == "completed"
    assert f"{tid}-leg0" not in world.scheduler.retries


def test_a_copy_that_stays_unreachable_fails_the_transfer_after_leg_retry_seconds(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leg_retry, "FIRST_DELAY", 0.0)
    world.scheduler.retries.retry_for = 0.2
    tid = two_by_two(world)["id"]
    world.tick()
    deadline = time.monotonic() + 10
    while world.get(tid)["state"] == "running" and time.monotonic() < deadline:
        _unreachable(world, f"{tid}-leg0")  # each resume fails again at once
        world.tick()
        time.sleep(0.02)
    failed = world.get(tid)
    assert failed["state"] == "failed"
    assert "connection refused" in failed["last_error"]
    assert re.search(r"\(resumed [1-9]\d* times over 0\.2 s: resume the transfer to try again\)",
                     failed["last_error"])  # fmt: skip
    world.tick()
    assert world.agents.copies["a", f"{tid}-leg1"]["state"] == "paused"  # as any failure


def test_no_retry_when_the_coordinator_is_told_not_to(world: World) -> None:
    world.scheduler.retries.retry_for = 0
    tid = two_by_two(world)["id"]
    world.tick()
    _unreachable(world, f"{tid}-leg0")
    world.tick()
    assert world.get(tid)["state"] == "failed"


def test_after_an_agent_restart_its_paused_copies_are_resumed(world: World) -> None:
    tid = two_by_two(world)["id"]
    world.tick()
    for copy in world.agents.copies.values():  # what load() does after a restart
        copy.update(state="paused", last_error="the agent stopped while the copy was running")
    world.tick()
    assert {c["state"] for c in world.agents.copies.values()} == {"running"}
    assert any("the agent stopped" in e for e in world.events(tid))
    assert world.get(tid)["state"] == "running"


def test_a_new_coordinator_keeps_running_copies_and_recreates_lost_ones(
    world: World,
) -> None:
    tid = two_by_two(world)["id"]
    world.tick()
    world.agents.finish("a", f"{tid}-leg0")
    world.tick()
    del world.agents.copies["a", f"{tid}-leg1"]  # the agent lost it
    again = AgentScheduler(world.sessions, world.agents)  # a restarted coordinator
    asyncio.run(again.tick())
    creates = [c[2] for c in world.agents.calls if c[1] == "create"]
    assert creates == [f"{tid}-leg0", f"{tid}-leg1", f"{tid}-leg1"]  # leg0 never again
    world.agents.finish("a", f"{tid}-leg1", skipped=3)
    asyncio.run(again.tick())
    done = world.get(tid)
    assert done["state"] == "completed"
    assert done["legs"][1]["summary"]["skipped_extents"] == 3


def test_a_new_transfer_wakes_the_scheduler_once_it_is_committed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []  # the transfers a pass woken then would find

    def wake() -> None:
        with world.sessions() as session:
            seen.append(list(session.scalars(select(Transfer.id))))

    monkeypatch.setattr(world.scheduler, "wake", wake)
    tid = two_by_two(world)["id"]
    assert seen == [[tid]]


def test_the_scheduler_loop_starts_and_stops_in_the_running_loop(world: World) -> None:
    async def main() -> None:
        scheduler = AgentScheduler(world.sessions, world.agents, interval=0.01)
        await scheduler.start()
        for _ in range(500):  # its passes run on their own, until one starts the transfer
            await asyncio.sleep(0.01)
            with world.sessions() as session:
                if session.get(Transfer, tid).state == "running":  # type: ignore[union-attr]
                    break
        scheduler.wake()
        await scheduler.stop()

    tid = two_by_two(world)["id"]
    asyncio.run(main())
    assert world.get(tid)["state"] == "running"


def test_a_copy_that_ends_is_seen_at_once_through_its_watch(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The passes are a minute apart here: the end of the copies reaches the transfer
    because the scheduler waits on each agent for its copy to change."""
    tid = two_by_two(world)["id"]
    world.tick()  # running: both copies created on agent a
    watching: list[str] = []

    async def main() -> None:
        ended = asyncio.Event()

        async def wait_copy(agent: AgentRef, copy_id: str, state: str, seconds: float) -> Json:
            watching.append(f"{copy_id} while {state} for {seconds:g} s")
            await ended.wait()
            return world.agents.copies[agent.name, copy_id]

        monkeypatch.setattr(world.agents, "wait_copy", wait_copy)
        scheduler = AgentScheduler(world.sessions, world.agents, interval=60)
        await scheduler.start()
        for _ in range(500):  # its first pass starts a watch per copy
            if len(watching) == 2:
                break
            await asyncio.sleep(0.01)
        world.agents.finish("a", f"{tid}-leg0")
        world.agents.finish("a", f"{tid}-leg1")
        ended.set()
        for _ in range(500):
            await asyncio.sleep(0.01)
            with world.sessions() as session:
                if session.get(Transfer, tid).state == "completed":  # type: ignore[union-attr]
                    break
        await scheduler.stop()

    asyncio.run(main())
    assert sorted(watching) == [f"{tid}-leg{i} while running for 30 s" for i in (0, 1)]
    assert world.get(tid)["state"] == "completed"


def test_no_more_copies_are_watched_at_once_than_the_limit(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch holds one of the agent client's connections: past the limit, copies are
    found by the passes alone."""
    tid = two_by_two(world)["id"]
    world.tick()
    waiting: list[str] = []

    async def main() -> None:
        async def wait_copy(agent: AgentRef, copy_id: str, state: str, seconds: float) -> Json:
            waiting.append(copy_id)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        monkeypatch.setattr(world.agents, "wait_copy", wait_copy)
        monkeypatch.setattr(scheduler_module, "WATCH_LIMIT", 1)
        scheduler = AgentScheduler(world.sessions, world.agents, interval=0.01)
        await scheduler.start()
        for _ in range(20):  # passes enough to start every watch there may be
            await asyncio.sleep(0.01)
        await scheduler.stop()

    asyncio.run(main())
    assert len(waiting) == 1 and waiting[0].startswith(tid)


# ---------------------------------------------------------------- the HTTP client


def test_the_agent_client_maps_answers_and_failures() -> None:
    credentials = AgentCredentials(bytes(range(32)))
    token = credentials.control_token("x")

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {token}"
        path = request.url.path
        if path.endswith("/gone"):
            return httpx.Response(404, json={"detail": "no copy"})
        if path.endswith("/busy/pause"):
            return httpx.Response(409, json={"detail": "it is completed"})
        if path.endswith("/broken"):
            return httpx.Response(500, text="oops")
        if path.endswith("/down"):
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"id": "c1", "state": "running"})

    agent = AgentRef("id", "x", "http://agent:8740")

    async def main() -> None:
        client = HttpAgentClient(credentials, transport=httpx.MockTransport(handler))
        try:
            assert await client.get_copy(agent, "c1") == {"id": "c1", "state": "running"}
            assert await client.get_copy(agent, "gone") is None
            with pytest.raises(AgentRefusedError, match="it is completed") as refused:
                await client.copy_action(agent, "busy", "pause")
            assert refused.value.status == 409
            for copy_id in ("broken", "down"):
                with pytest.raises(AgentUnreachableError, match="agent 'x'"):
                    await client.get_copy(agent, copy_id)
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_coordinator_start_is_recorded_on_the_transfers_under_way(world: World) -> None:
    tid = two_by_two(world)["id"]
    world.tick()  # running now

    async def restart() -> None:
        again = AgentScheduler(world.sessions, world.agents, interval=10)
        await again.start()
        await again.stop()

    asyncio.run(restart())
    assert "coordinator started: following its copies" in world.events(tid)
