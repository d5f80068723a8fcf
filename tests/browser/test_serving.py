"""How the coordinator serves the dashboard (``server/app/web.py``), without a browser: the
built folder at ``/``, the API and /metrics untouched, no static route in the OpenAPI
schema, and a 503 saying how to build it when the folder is missing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from reservoir.server import ServerSettings, create_app
from reservoir.server.app import web

USER = "serving-user-token-0123456789abcdef"


class Client:
    """GETs into the app in process (no lifespan: no route used here needs the db)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def get(self, path: str) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://server") as c:
                return await c.get(path)

        return asyncio.run(go())


def client(tmp_path: Path) -> Client:
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'server.db'}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
    )
    return Client(create_app(settings))


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    dist = tmp_path / "dist"
    (dist / "vendor").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><title>Reservoir</title>")
    (dist / "app.js").write_text("export {};\n")
    monkeypatch.setattr(web, "DIST", dist)
    yield dist


def test_the_built_dashboard_is_served_at_the_root(built: Path, tmp_path: Path) -> None:
    c = client(tmp_path)
    r = c.get("/")
    assert r.status_code == 200 and "<title>Reservoir</title>" in r.text
    assert r.headers["content-type"].startswith("text/html")
    r = c.get("/app.js")
    assert r.status_code == 200 and "javascript" in r.headers["content-type"]
    assert c.get("/no-such-file.js").status_code == 404
    assert c.get("/api/v1/health").json()["status"] == "ok"
    assert c.get("/api/v1/agents").status_code == 401
    assert c.get("/metrics").status_code == 401


def test_the_openapi_schema_has_no_static_route(built: Path, tmp_path: Path) -> None:
    paths = client(tmp_path).get("/api/v1/openapi.json").json()["paths"]
    assert paths and all(p.startswith(("/api/v1/", "/metrics")) for p in paths), list(paths)


def test_without_a_build_the_root_answers_503_saying_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "DIST", tmp_path / "not-built")
    c = client(tmp_path)
    r = c.get("/")
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("text/plain")
    assert "make install" in r.text
    assert c.get("/api/v1/health").status_code == 200
    assert c.get("/api/v1/agents").status_code == 401


def test_the_build_holds_the_page_and_the_vendored_uplot() -> None:
    if not (web.DIST / "index.html").is_file():
        pytest.skip(f"the dashboard is not built ({web.DIST}): run make install")
    index = (web.DIST / "index.html").read_text()
    assert 'src="app.js"' in index and 'href="vendor/uPlot.min.css"' in index
    assert (web.DIST / "vendor" / "uPlot.esm.js").is_file()
    for module in ("app.js", "api.js", "telemetry.js", "charts.js", "views/transfer.js"):
        assert (web.DIST / module).is_file(), module
