"""Registering an agent from what it reports (discover), and changing it (PATCH), on
SQLite and on PostgreSQL (the ``api`` fixture of test_server_api)."""

from __future__ import annotations

from typing import Any

from fake_volumes import reported
from test_server_api import Api, api, ok

__all__ = ["api"]  # the fixture, used by name

Json = dict[str, Any]
URL = "http://10.0.0.5:8740"
ETH = {"name": "eth1", "addresses": ["10.0.0.5", "fd00::5"], "speed_bps": 25 * 10**9,
       "mtu": 9000, "up": True, "loopback": False}  # fmt: skip
SLOW = {"name": "eth2", "addresses": ["10.1.0.5"], "speed_bps": None, "mtu": 1500,
        "up": True, "loopback": False}  # fmt: skip
DOWN = {"name": "eth3", "addresses": ["10.2.0.5"], "speed_bps": 10**10, "mtu": 1500,
        "up": False, "loopback": False}  # fmt: skip
LO = {"name": "lo", "addresses": ["127.0.0.1"], "speed_bps": None, "mtu": 65536,
      "up": True, "loopback": True}  # fmt: skip
IQN = "iqn.2026-11.org.reservoir:disk5"


def agent_reports(c: Api, nics: list[Json], url: str = URL) -> None:
    """An agent at ``url`` with a file, two LUNs and a broken file, and ``nics``."""
    volumes = [
        {"name": "x", "path": "/srv/data/vol 0.img", "size_bytes": 1 << 30},
        {"name": "y", "iqn": IQN, "lun": 0, "size_bytes": 1 << 31},
        {"name": "z", "iqn": IQN, "lun": 1, "size_bytes": 1 << 31},
    ]
    c.agents.has({"name": "disk5", "control_url": url, "volumes": volumes})
    c.agents.by_url[url].append(
        {**reported("disk5", volumes[0]), "path": "/gone", "error": "ENOENT"}
    )
    c.agents.infos[url] = {"nics": nics, "target_portals": ["10.0.0.5:3260"]}


def test_an_agent_registered_from_what_it_reports(api: Api) -> None:
    agent_reports(api, [LO, ETH, SLOW, DOWN])
    body = {"name": "disk5", "control_url": URL, "discover": True, "nic_speed_bps": 10**9}
    a = ok(api.post("/agents", json=body))
    assert a["nics"] == [
        {"name": "eth1", "address": "10.0.0.5", "speed_bps": 25 * 10**9},
        {"name": "eth2", "address": "10.1.0.5", "speed_bps": 10**9},
    ]
    volumes = {v["name"]: v for v in a["volumes"]}
    assert set(volumes) == {"vol-0.img", "lun0", "lun1"}  # the broken one is left out
    assert volumes["vol-0.img"]["path"] == "/srv/data/vol 0.img"
    assert volumes["lun1"]["iqn"] == IQN and volumes["lun1"]["portal"] == "10.0.0.5:3260"
    assert all(v["device_id"].startswith("naa.") for v in a["volumes"])


def test_a_nic_of_unknown_speed_needs_nic_speed_bps_and_nothing_is_stored(api: Api) -> None:
    agent_reports(api, [ETH, SLOW])
    r = api.post("/agents", json={"name": "disk5", "control_url": URL, "discover": True})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "nic_speed_bps"]
    assert "eth2" in r.json()["detail"]
    assert api.get("/agents").json() == []


def test_loopback_nics_are_taken_only_for_an_agent_on_loopback(api: Api) -> None:
    agent_reports(api, [LO, ETH], url="http://127.0.0.1:8740")
    body = {"name": "disk5", "control_url": "http://127.0.0.1:8740", "discover": True,
            "nic_speed_bps": 10**10, "volumes": []}  # fmt: skip
    a = ok(api.post("/agents", json=body))
    assert [n["name"] for n in a["nics"]] == ["lo"]


def test_an_agent_that_does_not_answer_is_422_with_the_reason(api: Api) -> None:
    body = {"name": "ghost", "control_url": "http://10.9.9.9:8740", "discover": True}
    r = api.post("/agents", json=body)
    assert r.status_code == 422 and "connection refused" in r.json()["detail"]


def test_patch_changes_the_url_nics_and_capabilities_and_refuses_an_unknown_nic(
    api: Api,
) -> None:
    agent_reports(api, [ETH])
    a = ok(api.post("/agents", json={"name": "disk5", "control_url": URL, "discover": True}))
    change = {
        "control_url": "https://10.0.0.5:8741",
        "nics": [{"name": "eth1", "speed_bps": 10**11}],
        "capabilities": ["io_uring"],
    }
    b = ok(api.patch(f"/agents/{a['id']}", json=change), 200)
    assert b["control_url"] == "https://10.0.0.5:8741/"
    assert b["nics"] == [{"name": "eth1", "address": "10.0.0.5", "speed_bps": 10**11}]
    assert b["capabilities"] == ["io_uring"] and b["volumes"] == a["volumes"]
    r = api.patch(f"/agents/{a['id']}", json={"nics": [{"name": "eth9", "speed_bps": 1}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "nics", 0, "name"]
    assert ok(api.get(f"/agents/{a['id']}"), 200)["nics"] == b["nics"]
    assert api.patch(f"/agents/{a['id']}", json={"name": "other"}).status_code == 422
    assert api.patch("/agents/nope", json={}).status_code == 404


def test_agents_carry_labels_changed_by_patch_and_listed_by(api: Api) -> None:
    agent_reports(api, [ETH])
    body = {"name": "disk5", "control_url": URL, "discover": True,
            "labels": {"site": "tokyo", "rack": "r12"}}  # fmt: skip
    a = ok(api.post("/agents", json=body))
    assert a["labels"] == {"rack": "r12", "site": "tokyo"}
    other = {"name": "disk6", "control_url": "http://10.0.0.6:8740", "labels": {"site": "osaka"}}
    ok(api.post("/agents", json=other))

    def names(**params: Any) -> list[str]:
        r = api.get("/agents", params=params)
        assert r.status_code == 200, r.text
        return [x["name"] for x in r.json()]

    assert names(label="site=tokyo") == ["disk5"]
    assert names(label="site") == ["disk5", "disk6"]
    assert names(label=["site", "rack=r12"]) == ["disk5"]
    b = ok(api.patch(f"/agents/{a['id']}", json={"labels": {"rack": None, "tier": "gold"}}), 200)
    assert b["labels"] == {"site": "tokyo", "tier": "gold"}
    assert names(label="rack") == []
    assert api.get("/agents", params={"label": "Bad Key"}).status_code == 422
    too_many = {f"k{i}": "v" for i in range(40)}
    assert api.patch(f"/agents/{a['id']}", json={"labels": too_many}).status_code == 422
    assert ok(api.get(f"/agents/{a['id']}"), 200)["labels"] == b["labels"]
