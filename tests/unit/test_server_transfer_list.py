"""Listing transfers a page at a time, with filters, and their labels (on SQLite and on
PostgreSQL: the ``api`` fixture of test_server_api)."""

from __future__ import annotations

from typing import Any

from test_server_api import Api, agent, api, ok, volume_set

__all__ = ["api"]  # the fixture, used by name

Json = dict[str, Any]


def site(c: Api, destinations: int) -> tuple[Json, list[Json]]:
    """A source set and ``destinations`` destination sets, each on an agent of its own."""
    source = volume_set(c, "src", [agent(c, "a")])
    return source, [volume_set(c, f"dst{i}", [agent(c, f"b{i}")]) for i in range(destinations)]


def start(c: Api, source: Json, dest: Json, **labels: str) -> Json:
    body = {"source": source["id"], "destination": dest["id"], "labels": labels}
    return ok(c.post("/transfers", json=body))


def ids(r: Any) -> list[str]:
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()]


def test_pages_follow_each_other_in_creation_order_until_the_last(api: Api) -> None:
    source, dests = site(api, 5)
    made = [start(api, source, d)["id"] for d in dests]
    seen: list[str] = []
    r = api.get("/transfers", params={"limit": 2})
    pages = 1
    while "X-Next-Cursor" in r.headers:
        seen += ids(r)
        assert r.headers["Link"].endswith('>; rel="next"')
        following = r.headers["Link"][1 : r.headers["Link"].index(">")]
        assert f"cursor={r.headers['X-Next-Cursor']}" in following and "limit=2" in following
        r = api.get("/transfers", params={"limit": 2, "cursor": r.headers["X-Next-Cursor"]})
        pages += 1
    seen += ids(r)
    assert seen == made and pages == 3
    assert "Link" not in r.headers
    assert ids(api.get("/transfers")) == made  # the default page holds them all
    newest = api.get("/transfers", params={"order": "desc", "limit": 3})
    assert ids(newest) == made[:1:-1]
    rest: dict[str, str | int] = {
        "order": "desc",
        "limit": 3,
        "cursor": newest.headers["X-Next-Cursor"],
    }
    assert ids(api.get("/transfers", params=rest)) == made[1::-1]


def test_filters_by_state_label_agent_and_time(api: Api) -> None:
    source, dests = site(api, 3)
    first = start(api, source, dests[0], team="disk", site="tokyo")
    second = start(api, source, dests[1], team="disk")
    third = start(api, source, dests[2], team="tape")
    ok(api.post(f"/transfers/{second['id']}/cancel"), 200)

    def listed(**params: Any) -> list[str]:
        return ids(api.get("/transfers", params=params))

    assert listed(label="team=disk") == [first["id"], second["id"]]
    assert listed(label=["team=disk", "site=tokyo"]) == [first["id"]]
    assert listed(label="site") == [first["id"]]
    assert listed(state="cancelled") == [second["id"]]
    assert listed(state=["queued", "cancelled"]) == [first["id"], second["id"], third["id"]]
    assert listed(agent="b2") == [third["id"]]
    assert listed(agent="a") == [first["id"], second["id"], third["id"]]
    assert listed(agent="nobody") == []
    assert listed(created_after=third["created_at"]) == [third["id"]]
    assert listed(created_before=second["created_at"]) == [first["id"]]


def test_labels_change_by_merge_patch(api: Api) -> None:
    source, dests = site(api, 1)
    t = start(api, source, dests[0], team="disk", tier="gold")
    assert t["labels"] == {"team": "disk", "tier": "gold"}
    patched = ok(
        api.patch(f"/transfers/{t['id']}", json={"labels": {"tier": None, "owner": "ops"}}), 200
    )
    assert patched["labels"] == {"owner": "ops", "team": "disk"}
    assert ok(api.get(f"/transfers/{t['id']}"), 200)["labels"] == patched["labels"]
    assert ids(api.get("/transfers", params={"label": "tier"})) == []
    assert api.patch("/transfers/nope", json={"labels": {}}).status_code == 404


def test_bad_labels_cursors_and_parameters_are_422_and_change_nothing(api: Api) -> None:
    source, dests = site(api, 1)
    r = api.post(
        "/transfers",
        json={"source": source["id"], "destination": dests[0]["id"], "labels": {"Team": "x"}},
    )
    assert r.status_code == 422 and api.get("/transfers").json() == []
    t = start(api, source, dests[0], team="disk")
    too_many = {f"k{i}": "v" for i in range(33)}
    assert api.patch(f"/transfers/{t['id']}", json={"labels": too_many}).status_code == 422
    assert ok(api.get(f"/transfers/{t['id']}"), 200)["labels"] == {"team": "disk"}
    for params in ({"cursor": "not-a-cursor"}, {"limit": 0}, {"colour": "red"},
                   {"label": "Bad Key=x"}, {"state": "sleeping"}):  # fmt: skip
        r = api.get("/transfers", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")


def test_the_inventorys_lists_come_in_pages_too(api: Api) -> None:
    agents = [agent(api, f"a{i}") for i in range(3)]
    for i, a in enumerate(agents):
        volume_set(api, f"set{i}", [a])
    for path, made in (("/agents", [a["id"] for a in agents]), ("/volume-sets", None)):
        first = api.get(path, params={"limit": 2})
        assert len(ids(first)) == 2 and "X-Next-Cursor" in first.headers
        rest = api.get(path, params={"limit": 2, "cursor": first.headers["X-Next-Cursor"]})
        assert len(ids(rest)) == 1 and "Link" not in rest.headers
        if made is not None:
            assert ids(first) + ids(rest) == made
        assert api.get(path, params={"cursor": "nope"}).status_code == 422
        assert api.get(path, params={"colour": "red"}).status_code == 422
    assert ids(api.get("/links")) == []
