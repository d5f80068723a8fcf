"""The routes over an in-process ASGI client with a fake engine: status codes and bodies."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from reservoir.agent.control import Agent, AgentSettings, create_app
from reservoir.agent.scsi import derive_naa
from reservoir.agent.storage import volume_identity
from reservoir.agent.transfer import (
    CopyError,
    CopyOptions,
    CopySummary,
    Progress,
    RemoteUnreachableError,
)

TOKEN = "unit-token-0123456789abcdef"


async def instant_copy(
    source: str,
    dest: str | Sequence[str],
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    await asyncio.sleep(0)
    dest = dest if isinstance(dest, str) else " + ".join(dest)
    return CopySummary(source, dest, 0, 4096, 4096, 0.1, "00" * 16, True, 4096, 0, 0, 0, 0, "")


async def endless_copy(
    source: str,
    dest: str | Sequence[str],
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


VOLUMES = ("a", "b", "s", "d", "d0", "d1", "e")


def vol(tmp_path: Path, name: str) -> str:
    """The path of one of the agent's source volumes (``api`` creates them)."""
    return str(tmp_path / "vols" / name)


@asynccontextmanager
async def api(
    tmp_path: Path, copy_fn: object, accepted: str = TOKEN, volumes: Sequence[str] = VOLUMES
) -> AsyncIterator[httpx.AsyncClient]:
    """The app over httpx's in-memory ASGI transport; the agent started as its lifespan
    would, with the files ``volumes`` (in tmp_path/vols) as its source volumes. It
    accepts ``accepted`` (a token or its digest); the client sends :data:`TOKEN`."""
    (tmp_path / "vols").mkdir(exist_ok=True)
    for name in VOLUMES:
        Path(vol(tmp_path, name)).touch()
    settings = AgentSettings(
        name="unit",
        tokens=[accepted],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        source_volumes=[Path(vol(tmp_path, name)) for name in volumes],
        cwnd_caps="pacing-rate",  # in the test process: no cgroup move
    )
    agent = Agent(settings, copy_fn=copy_fn)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=create_app(agent))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    await agent.start()
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://agent/api/v1", headers=headers
        ) as c:
            yield c
    finally:
        await agent.stop()


async def wait_state(c: httpx.AsyncClient, copy_id: str, state: str) -> dict[str, object]:
    for _ in range(200):
        body: dict[str, object] = (await c.get(f"/copies/{copy_id}")).json()
        if body["state"] == state:
            return body
        await asyncio.sleep(0.01)
    raise AssertionError(f"copy {copy_id} never {state}")


def test_created_copy_is_201_and_hides_the_chap_secret(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            body = {
                "source": vol(tmp_path, "a"),
                "dest": vol(tmp_path, "b"),
                "chap": {"user": "u", "secret": "s3cret-s3cret"},
            }
            r = await c.post("/copies", json=body)
            assert r.status_code == 201
            assert r.json()["chap_user"] == "u" and "s3cret" not in r.text
            shown = await wait_state(c, r.json()["id"], "completed")
            assert shown["summary"] is not None

    asyncio.run(main())


def test_pause_of_a_completed_copy_is_409_with_the_reason(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            copy_id = (
                await c.post(
                    "/copies", json={"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
                )
            ).json()["id"]
            await wait_state(c, copy_id, "completed")
            r = await c.post(f"/copies/{copy_id}/pause")
            assert r.status_code == 409
            assert r.json()["detail"] == (
                f"cannot pause copy {copy_id}: it is completed (allowed when queued, running)"
            )

    asyncio.run(main())


def test_a_copy_failed_for_a_target_it_could_not_reach_says_it_is_retryable(
    tmp_path: Path,
) -> None:
    """A copy that failed as RemoteUnreachableError is ``retryable``: a resume may go on
    (the coordinator resumes it). Another failure is not, and a resume clears it."""
    failures = [
        RemoteUnreachableError("nothing listens at 10.0.0.2:3260 (connection refused)"),
        CopyError("destination is held by another initiator"),
    ]

    async def failing_copy(*args: object, **kwargs: object) -> CopySummary:
        raise failures.pop(0)

    async def main() -> None:
        async with api(tmp_path, failing_copy) as c:
            body = {"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
            copy_id = (await c.post("/copies", json=body)).json()["id"]
            failed = await wait_state(c, copy_id, "failed")
            assert failed["retryable"] is True and "connection refused" in str(failed["last_error"])
            resumed = (await c.post(f"/copies/{copy_id}/resume")).json()
            assert resumed["retryable"] is False and resumed["last_error"] is None
            failed = await wait_state(c, copy_id, "failed")
            assert failed["retryable"] is False and "another initiator" in str(failed["last_error"])

    asyncio.run(main())


def test_pause_resume_cancel_through_the_api(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, endless_copy) as c:
            copy_id = (
                await c.post(
                    "/copies", json={"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
                )
            ).json()["id"]
            await wait_state(c, copy_id, "running")
            assert (await c.post(f"/copies/{copy_id}/pause")).json()["state"] == "paused"
            assert (await c.post(f"/copies/{copy_id}/resume")).json()["state"] == "queued"
            await wait_state(c, copy_id, "running")
            assert (await c.post(f"/copies/{copy_id}/resume")).status_code == 409
            assert (await c.post(f"/copies/{copy_id}/cancel")).json()["state"] == "cancelled"

    asyncio.run(main())


def test_agent_stop_pauses_a_running_copy(tmp_path: Path) -> None:
    async def main() -> str:
        async with api(tmp_path, endless_copy) as c:
            copy_id = (
                await c.post(
                    "/copies", json={"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
                )
            ).json()["id"]
            await wait_state(c, copy_id, "running")
        async with api(tmp_path, endless_copy) as c:
            shown = (await c.get(f"/copies/{copy_id}")).json()
            assert shown["state"] == "paused"
            assert shown["last_error"] == "paused: the agent stopped"
        return str(copy_id)

    asyncio.run(main())


def test_a_get_with_wait_answers_when_the_copy_changes_state(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, endless_copy) as c:
            body = {"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
            copy_id = (await c.post("/copies", json=body)).json()["id"]
            await wait_state(c, copy_id, "running")
            url = f"/copies/{copy_id}"
            waiting = asyncio.create_task(c.get(url, params={"while_state": "running", "wait": 30}))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            assert (await c.post(f"{url}/cancel")).status_code == 200
            answer = await asyncio.wait_for(waiting, 10)
            assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
            same = await c.get(url, params={"while_state": "cancelled", "wait": 0.05})
            assert same.status_code == 200 and same.json()["state"] == "cancelled"
            for bad in ({"while_state": "runing"}, {"wait": 61}, {"wait": -1}):
                r = await c.get(url, params={"while_state": "running", "wait": 1, **bad})
                assert r.status_code == 422, bad
            gone = await c.get("/copies/nope", params={"while_state": "running", "wait": 1})
            assert gone.status_code == 404

    asyncio.run(main())


def test_wrong_token_is_401_and_health_is_open(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            r = await c.get("/copies", headers={"Authorization": "Bearer nope"})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            basic = await c.get("/copies", headers={"Authorization": "Basic x"})
            assert basic.status_code == 401
            assert (await c.get("/health", headers={"Authorization": ""})).status_code == 200

    asyncio.run(main())


def test_openapi_names_each_operation_after_its_route_once(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with api(tmp_path, instant_copy) as c:
            spec = (await c.get("/openapi.json")).json()
        return [op["operationId"] for path in spec["paths"].values() for op in path.values()]

    ids = asyncio.run(main())
    assert len(ids) == len(set(ids)) and "create_copy" in ids
    assert all(i.isidentifier() and "api_v1" not in i for i in ids)


def test_a_token_configured_as_its_sha256_digest_is_accepted_and_others_refused(
    tmp_path: Path,
) -> None:
    digest = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()

    async def main() -> None:
        async with api(tmp_path, instant_copy, accepted=digest) as c:
            assert (await c.get("/copies")).status_code == 200
            for wrong in (TOKEN + "x", digest, digest.removeprefix("sha256:")):
                r = await c.get("/copies", headers={"Authorization": f"Bearer {wrong}"})
                assert r.status_code == 401, wrong

    asyncio.run(main())


def test_telemetry_limit_is_validated(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            copy_id = (
                await c.post(
                    "/copies", json={"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
                )
            ).json()["id"]
            url = f"/copies/{copy_id}/telemetry"
            assert (await c.get(url, params={"limit": 0})).status_code == 422
            assert (await c.get(url)).json() == []

    asyncio.run(main())


def test_info_without_a_builtin_target(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            info = (await c.get("/info")).json()
            assert info["name"] == "unit" and info["volumes"] == []
            assert info["target_portals"] == [] and info["caps_requested"] == {}

    asyncio.run(main())


def test_info_reports_the_agent_processs_cpu_seconds(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            first = (await c.get("/info")).json()["cpu_seconds"]
            sum(i * i for i in range(200_000))  # some CPU in this (the agent's) process
            second = (await c.get("/info")).json()["cpu_seconds"]
            assert isinstance(first, float) and 0 < first <= second

    asyncio.run(main())


def test_a_striped_copy_is_201_and_reports_its_destinations(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            body = {
                "source": vol(tmp_path, "s"),
                "dest": [vol(tmp_path, "d0"), vol(tmp_path, "d1")],
                "stripe_unit": 1 << 20,
            }
            r = await c.post("/copies", json=body)
            assert r.status_code == 201, r.text
            done = await wait_state(c, r.json()["id"], "completed")
            assert (
                done["dest"] == [vol(tmp_path, "d0"), vol(tmp_path, "d1")]
                and done["stripe_unit"] == 1 << 20
            )

    asyncio.run(main())


def test_striping_options_that_do_not_fit_are_422(tmp_path: Path) -> None:
    bad: list[dict[str, Any]] = [
        {"dest": [vol(tmp_path, "d0"), vol(tmp_path, "d1")]},  # no stripe unit
        {"dest": vol(tmp_path, "d0"), "stripe_unit": 1 << 20},  # one destination
        {
            "dest": [vol(tmp_path, "d0"), vol(tmp_path, "d1")],
            "stripe_unit": 1000,
        },  # not a multiple of 4096
        {"dest": [vol(tmp_path, "d0"), vol(tmp_path, "d1")], "stripe_unit": 4096, "paths": ["a=b"]},
        {"dest": [vol(tmp_path, "d0"), vol(tmp_path, "d0")], "stripe_unit": 4096},
        {"dest": []},
    ]

    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            for extra in bad:
                r = await c.post("/copies", json={"source": vol(tmp_path, "s"), **extra})
                assert r.status_code == 422, extra

    asyncio.run(main())


def test_create_with_a_given_id_is_idempotent(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, endless_copy) as c:
            body = {"id": "t-leg0", "source": vol(tmp_path, "s"), "dest": vol(tmp_path, "d")}
            first = await c.post("/copies", json=body)
            again = await c.post("/copies", json=body)
            other = await c.post("/copies", json={**body, "dest": vol(tmp_path, "e")})
            bad_id = await c.post("/copies", json={**body, "id": "../x"})
            assert (first.status_code, again.status_code) == (201, 200)
            assert first.json()["id"] == again.json()["id"] == "t-leg0"
            assert other.status_code == 409 and bad_id.status_code == 422
            await c.post("/copies/t-leg0/cancel")

    asyncio.run(main())


def test_a_congestion_control_the_host_lacks_is_422_and_one_it_has_reaches_the_copy(
    tmp_path: Path,
) -> None:
    seen: list[str | None] = []

    async def recording_copy(
        source: str,
        dest: str | Sequence[str],
        options: CopyOptions,
        *,
        progress: Callable[[Progress], None] | None = None,
    ) -> CopySummary:
        seen.append(options.congestion)
        return await instant_copy(source, dest, options, progress=progress)

    async def main() -> None:
        async with api(tmp_path, recording_copy) as c:
            body = {
                "source": vol(tmp_path, "a"),
                "dest": vol(tmp_path, "b"),
                "congestion": "no_such_cc",
            }
            r = await c.post("/copies", json=body)
            assert r.status_code == 422
            assert "no_such_cc" in r.json()["detail"] and "not available" in r.json()["detail"]
            assert (await c.get("/copies")).json() == []
            r = await c.post("/copies", json={**body, "congestion": "reno"})
            assert r.status_code == 201
            await wait_state(c, r.json()["id"], "completed")

    asyncio.run(main())
    assert seen == ["reno"]  # reno is always built in


def test_resuming_a_copy_whose_source_is_no_longer_a_volume_is_403(tmp_path: Path) -> None:
    source, dest = vol(tmp_path, "a"), vol(tmp_path, "b")

    async def main() -> None:
        async with api(tmp_path, endless_copy) as c:
            copy_id = (await c.post("/copies", json={"source": source, "dest": dest})).json()["id"]
            await wait_state(c, copy_id, "running")
            assert (await c.post(f"/copies/{copy_id}/pause")).status_code == 200
        async with api(tmp_path, endless_copy, volumes=("b",)) as c:  # "a" taken out
            r = await c.post(f"/copies/{copy_id}/resume")
            assert r.status_code == 403
            assert r.json()["detail"].startswith(f"{source} is not one of this agent's volumes")
            assert (await c.get(f"/copies/{copy_id}")).json()["state"] == "paused"

    asyncio.run(main())


def test_a_copy_outside_the_volumes_is_403_and_never_reaches_the_engine(tmp_path: Path) -> None:
    calls: list[str] = []

    async def recording_copy(
        source: str,
        dest: str | Sequence[str],
        options: CopyOptions,
        *,
        progress: Callable[[Progress], None] | None = None,
    ) -> CopySummary:
        calls.append(source)
        return await instant_copy(source, dest, options, progress=progress)

    async def main() -> None:
        async with api(tmp_path, recording_copy) as c:
            r = await c.post("/copies", json={"source": "/etc/shadow", "dest": vol(tmp_path, "b")})
            assert r.status_code == 403
            assert r.json()["detail"].startswith("/etc/shadow is not one of this agent's volumes")
            assert (await c.get("/copies")).json() == []

    asyncio.run(main())
    assert calls == []


def test_volumes_lists_the_source_volumes_without_a_target(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy, volumes=("a",)) as c:
            listed = (await c.get("/volumes")).json()
            assert listed == [
                {
                    "path": vol(tmp_path, "a"),
                    "kind": "source",
                    "size_bytes": 0,
                    "device_id": "naa." + derive_naa(volume_identity(vol(tmp_path, "a"))).hex(),
                    "read_only": False,
                    "iqn": None,
                    "lun": None,
                    "error": None,
                }
            ]

    asyncio.run(main())


def test_an_unknown_verification_is_422_and_receipt_is_shown_on_the_copy(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, instant_copy) as c:
            body = {"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
            r = await c.post("/copies", json={**body, "verification": "read-back"})
            assert r.status_code == 422
            assert r.json()["errors"][0]["loc"] == ["body", "verification"]
            default = await c.post("/copies", json=body)
            assert default.json()["verification"] == "storage"
            r = await c.post("/copies", json={**body, "verification": "receipt"})
            assert r.status_code == 201
            shown = await wait_state(c, r.json()["id"], "completed")
            assert shown["verification"] == "receipt"

    asyncio.run(main())
