"""An agent touches only its volumes: its target's LUNs and its configured
``source_volumes``. A real agent (uvicorn in a thread, as test_agent_api.py runs it)
with its builtin target; copies outside its volumes are refused before any byte moves,
and ``GET /volumes`` names each volume by the device identifier the target reports.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent, AgentSettings, make_server
from reservoir.agent.initiator import Session
from reservoir.agent.scsi import derive_naa
from reservoir.agent.storage import volume_identity
from reservoir.agent.target import config as tcfg
from reservoir.lab.peers import free_port

from .servers import running

pytestmark = pytest.mark.integration

TOKEN = "test-token-0123456789abcdef"
IQN = "iqn.2026-11.org.reservoir:agent-volumes"
INITIATOR = "iqn.2026-11.org.reservoir:volumes-test"
MiB = 1 << 20
SIZE = 4 * MiB


@dataclass
class Site:
    url: str
    portal: int
    luns: list[Path]  # lun 0, lun 1 (read-write), lun 2 (read-only)
    source: Path  # a configured source volume
    outside: Path  # a file that is none of the agent's volumes

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=30)


def filled(path: Path, byte: int) -> Path:
    path.write_bytes(bytes([byte]) * SIZE)
    return path


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    luns = [filled(tmp_path / f"lun{i}.img", i) for i in range(3)]
    portal = free_port()
    target = tcfg.TargetConfig(
        portals=[("127.0.0.1", portal)],
        targets=[
            tcfg.Target(
                iqn=IQN,
                luns=[tcfg.Lun(i, str(p), read_only=i == 2) for i, p in enumerate(luns)],
                open=True,
            )
        ],
    )
    tcfg.save(target, tmp_path / "target.toml")
    source = filled(tmp_path / "source.img", 0x5A)
    outside = filled(tmp_path / "victim.img", 0xEE)
    settings = AgentSettings(
        name="agent-volumes",
        listen=f"127.0.0.1:{free_port()}",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        target_config=tmp_path / "target.toml",
        source_volumes=[source, tmp_path / "missing.img"],
        cwnd_caps="pacing-rate",  # the agent runs in the test process: no cgroup move
    )
    with running(make_server(settings, Agent(settings)), "agent-volumes"):
        yield Site(f"http://127.0.0.1:{settings.port}", portal, luns, source, outside)


def post_copy(site: Site, source: Path | str, dest: Path | str) -> httpx.Response:
    with site.client() as c:
        return c.post("/copies", json={"source": str(source), "dest": str(dest)})


def wait_completed(site: Site, copy_id: str) -> dict[str, Any]:
    with site.client() as c:
        for _ in range(1500):
            copy: dict[str, Any] = c.get(f"/copies/{copy_id}").json()
            if copy["state"] not in ("queued", "running"):
                return copy
            time.sleep(0.02)
    raise AssertionError(f"copy {copy_id} still runs")


def test_a_copy_into_a_file_outside_the_volumes_is_403_and_leaves_it_unchanged(
    site: Site,
) -> None:
    before = site.outside.read_bytes()
    r = post_copy(site, site.luns[0], site.outside)
    assert r.status_code == 403, r.text
    assert str(site.outside) in r.json()["detail"]
    assert "not one of this agent's volumes" in r.json()["detail"]
    with site.client() as c:
        assert c.get("/copies").json() == []
    assert site.outside.read_bytes() == before


def test_a_copy_from_a_file_outside_the_volumes_is_403_and_writes_nothing(site: Site) -> None:
    before = site.luns[1].read_bytes()
    r = post_copy(site, site.outside, site.luns[1])
    assert r.status_code == 403, r.text
    assert str(site.outside) in r.json()["detail"]
    assert site.luns[1].read_bytes() == before


def test_a_copy_into_a_missing_path_is_403_and_creates_nothing(site: Site, tmp_path: Path) -> None:
    for dest in (tmp_path / "new.img", tmp_path / "missing.img"):  # the second is configured
        r = post_copy(site, site.source, dest)
        assert r.status_code == 403, r.text
        assert str(dest) in r.json()["detail"] and "does not exist" in r.json()["detail"]
        assert not dest.exists()


def test_a_read_only_lun_may_be_read_but_not_written(site: Site) -> None:
    r = post_copy(site, site.source, site.luns[2])
    assert r.status_code == 403, r.text
    assert str(site.luns[2]) in r.json()["detail"] and "read-only" in r.json()["detail"]
    assert site.luns[2].read_bytes() == bytes([2]) * SIZE
    r = post_copy(site, site.luns[2], site.luns[1])
    assert r.status_code == 201, r.text
    assert wait_completed(site, r.json()["id"])["state"] == "completed"
    assert site.luns[1].read_bytes() == bytes([2]) * SIZE


def test_other_spellings_of_a_volume_are_that_volume(site: Site, tmp_path: Path) -> None:
    link = tmp_path / "link-to-source"
    link.symlink_to(site.source)
    dotted = tmp_path / "." / "sub" / ".." / "lun1.img"
    (tmp_path / "sub").mkdir()
    r = post_copy(site, link, dotted)
    assert r.status_code == 201, r.text
    copy = wait_completed(site, r.json()["id"])
    assert copy["state"] == "completed", copy["last_error"]
    assert site.luns[1].read_bytes() == site.source.read_bytes()


def test_a_symlink_to_a_file_outside_the_volumes_is_refused(site: Site, tmp_path: Path) -> None:
    link = tmp_path / "innocent.img"
    link.symlink_to(site.outside)
    r = post_copy(site, site.source, link)
    assert r.status_code == 403, r.text
    assert str(link) in r.json()["detail"]
    assert site.outside.read_bytes() == bytes([0xEE]) * SIZE


def test_iscsi_endpoints_are_other_targets_and_allowed(site: Site) -> None:
    url = f"iscsi://127.0.0.1:{site.portal}/{IQN}/1"
    r = post_copy(site, site.source, url)
    assert r.status_code == 201, r.text
    copy = wait_completed(site, r.json()["id"])
    assert copy["state"] == "completed", copy["last_error"]
    assert site.luns[1].read_bytes() == site.source.read_bytes()


async def vpd_naa(port: int, lun: int) -> str:
    """The NAA designator of INQUIRY VPD 0x83, as ``naa.`` and its hex digits."""
    cdb = struct.pack(">BBBHB", 0x12, 0x01, 0x83, 255, 0)
    async with await Session.open("127.0.0.1", port, IQN, initiator_name=INITIATOR) as s:
        data = (await s.scsi(lun, cdb, read_length=255)).data
    end, at = 4 + struct.unpack(">H", data[2:4])[0], 4
    while at < end:
        kind, length = data[at + 1] & 0x0F, data[at + 3]
        if kind == 3:  # NAA
            return "naa." + data[at + 4 : at + 4 + length].hex()
        at += 4 + length
    raise AssertionError("no NAA designator in VPD 0x83")


def test_volumes_are_listed_with_the_device_id_the_target_reports(
    site: Site, tmp_path: Path
) -> None:
    with site.client() as c:
        r = c.get("/volumes")
    assert r.status_code == 200, r.text
    listed = {v["path"]: v for v in r.json()}
    for i, lun in enumerate(site.luns):
        got = listed[str(lun)]
        assert got["device_id"] == asyncio.run(vpd_naa(site.portal, i))
        assert (got["kind"], got["iqn"], got["lun"]) == ("lun", IQN, i)
        assert (got["size_bytes"], got["read_only"], got.get("error")) == (SIZE, i == 2, None)
    source = listed[str(site.source)]
    expected = "naa." + derive_naa(volume_identity(site.source)).hex()
    assert (source["kind"], source["device_id"], source["size_bytes"]) == ("source", expected, SIZE)
    assert (source["iqn"], source["lun"], source["read_only"]) == (None, None, False)
    missing = listed[str(tmp_path / "missing.img")]
    assert missing["device_id"] is None and "does not exist" in missing["error"]
    assert len(listed) == 5


def test_volumes_need_the_token(site: Site) -> None:
    r = httpx.get(f"{site.url}/api/v1/volumes", timeout=10)
    assert r.status_code == 401


def test_a_0600_source_outside_the_volumes_never_reaches_a_lun(site: Site, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"root's secret\n" * 100)
    os.chmod(secret, 0o600)
    r = post_copy(site, secret, site.luns[0])
    assert r.status_code == 403, r.text
    assert b"secret" not in site.luns[0].read_bytes()
