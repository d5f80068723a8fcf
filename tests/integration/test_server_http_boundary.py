"""The coordinator's HTTP boundary on a real uvicorn server: a body over its limit is
refused before it is read, a request without a valid token is refused before its body
is read, a 422 names the fields without echoing what was sent, and NaN or Infinity in
a JSON body is a 422, not a server error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reservoir.server import ServerSettings

from .httpraw import captured_logs, long_string_body, send_partly
from .test_server_api import USER, client, serve_in_thread, settings_for

AGENT_API_TOKEN = "a-secret-that-must-never-come-back-0123456789"  # refused, never echoed

pytestmark = pytest.mark.integration

MiB = 1 << 20
WRONG = "wrong-token-0123456789abcdef"
NON_FINITE = "NaN and Infinity are not valid JSON numbers"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> ServerSettings:
    folder = tmp_path_factory.mktemp("boundary")
    return settings_for(f"sqlite:///{folder / 'server.db'}", folder)


@pytest.fixture(scope="module")
def api(settings: ServerSettings) -> Iterator[str]:
    with serve_in_thread(settings) as url:
        yield url


def post_head(path: str, token: str | None, **headers: str) -> tuple[str, dict[str, str]]:
    fields = {"Host": "127.0.0.1", "Content-Type": "application/json", **headers}
    if token is not None:
        fields["Authorization"] = f"Bearer {token}"
    return f"POST /api/v1{path} HTTP/1.1", fields


def agent_body(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "boundary-agent",
        "control_url": "http://127.0.0.1:8740",
        "nics": [{"name": "eth1", "address": "10.0.0.1", "speed_bps": 10**10}],
        "volumes": [{"name": "vol0", "path": "/dev/vdb", "size_bytes": 64 * MiB}],
    }
    return body | changes


def still_serves(api: str) -> None:
    with client(api) as c:
        assert c.get("/agents").status_code == 200


# ---------------------------------------------------------------- body limits


def test_a_body_declared_over_max_body_bytes_is_413_before_it_is_sent(
    api: str, settings: ServerSettings
) -> None:
    line, headers = post_head("/links", USER, **{"Content-Length": str(2 * MiB)})
    answer = send_partly(settings.host, settings.port, line, headers)
    assert answer.status == 413
    assert "max_body_bytes" in answer.json()["detail"]
    still_serves(api)


def test_a_refusal_before_the_body_is_a_problem_with_the_request_id(
    api: str, settings: ServerSettings
) -> None:
    fields = {"Content-Length": str(2 * MiB), "X-Request-ID": "script-run-7.step-2"}
    line, headers = post_head("/links", USER, **fields)
    answer = send_partly(settings.host, settings.port, line, headers)
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["x-request-id"] == "script-run-7.step-2"
    problem = answer.json()
    assert (problem["status"], problem["code"]) == (413, "body_too_large")
    assert problem["request_id"] == "script-run-7.step-2"
    assert problem["instance"] == "/api/v1/links"


def test_a_chunked_body_over_max_body_bytes_is_413(api: str) -> None:
    body = long_string_body("name")
    with client(api) as c:
        r = c.post("/links", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert "max_body_bytes" in r.json()["detail"]
    still_serves(api)


def test_a_body_just_under_max_body_bytes_is_read(api: str) -> None:
    with client(api) as c:
        r = c.post("/links", json={"name": "x" * (MiB - 1024)})
    assert r.status_code == 422  # read, parsed and validated: the name is too long


# ---------------------------------------------------------------- authentication first


def test_a_large_upload_with_a_wrong_token_is_401_before_it_is_sent(
    api: str, settings: ServerSettings
) -> None:
    """50 MB declared, 64 KiB sent: the answer comes while 49.9 MB are still owed."""
    line, headers = post_head("/campaigns/results", WRONG, **{"Content-Length": "50000000"})
    answer = send_partly(settings.host, settings.port, line, headers, b"[" * (64 * 1024))
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["detail"] == "the token is not valid"
    assert answer.json()["code"] == "unauthorized"
    still_serves(api)


def test_a_chunked_body_without_a_token_is_401_before_it_ends(
    api: str, settings: ServerSettings
) -> None:
    line, headers = post_head("/agents", None, **{"Transfer-Encoding": "chunked"})
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"  # and no last chunk
    answer = send_partly(settings.host, settings.port, line, headers, chunk)
    assert answer.status == 401
    assert answer.json()["detail"] == "a bearer token is required"
    assert answer.json()["code"] == "unauthorized"


# ---------------------------------------------------------------- 422 without the input


def test_a_422_names_the_fields_without_echoing_the_token_or_the_input(api: str) -> None:
    long_name = "n" * 200_000
    body = agent_body(  # a secret where a URL belongs: the 422 must not quote it
        name=long_name,
        control_url=f"not a url {AGENT_API_TOKEN}",
        nics="not a list",
        volumes=[{"size_bytes": "many"}],
    )
    with client(api) as c:
        r = c.post("/agents", json=body)
    assert r.status_code == 422
    assert AGENT_API_TOKEN not in r.text and "n" * 100 not in r.text and "many" not in r.text
    assert len(r.content) < 4096
    errors = r.json()["errors"]
    assert {("body", "name"), ("body", "nics")} <= {tuple(e["loc"]) for e in errors}
    assert all(set(e) == {"loc", "msg", "type"} for e in errors)


def test_a_422_of_a_body_of_the_wrong_shape_does_not_echo_it(api: str) -> None:
    with client(api) as c:
        r = c.post("/agents", json=[agent_body(api_token=AGENT_API_TOKEN)])
    assert r.status_code == 422
    assert AGENT_API_TOKEN not in r.text
    [error] = r.json()["errors"]
    assert error["loc"] == ["body"]


def test_a_422_lists_a_bounded_number_of_errors(api: str) -> None:
    members = [{"agent_id": "", "volume": ""} for _ in range(500)]
    with client(api) as c:
        r = c.post("/volume-sets", json={"name": "many", "members": members})
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert len(errors) <= 21
    assert errors[-1]["type"] == "too_many_errors" and "more" in errors[-1]["msg"]


def test_an_invalid_json_body_is_422_without_echoing_it(api: str) -> None:
    with client(api) as c:
        r = c.post(
            "/agents",
            content=json.dumps(agent_body(api_token=AGENT_API_TOKEN))[:-1],
            headers={"Content-Type": "application/json"},
        )
    assert r.status_code == 422
    assert AGENT_API_TOKEN not in r.text
    [error] = r.json()["errors"]
    assert error["type"] == "json_invalid" and error["loc"][0] == "body"


# ---------------------------------------------------------------- NaN and Infinity


def raw_json(c: httpx.Client, path: str, text: str) -> httpx.Response:
    return c.post(path, content=text, headers={"Content-Type": "application/json"})


def test_nan_in_a_link_is_422_and_stores_nothing(api: str) -> None:
    with client(api) as c:
        r = raw_json(
            c,
            "/links",
            '{"name": "nan-link", "agent_a": "a", "nic_a": "eth1", "agent_b": "b",'
            ' "nic_b": "eth1", "capacity_bps": 1000000000, "rtt_ms": NaN}',
        )
        links = c.get("/links").json()
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"] == [{"loc": ["body"], "msg": NON_FINITE, "type": "json_invalid"}]
    assert all(link["name"] != "nan-link" for link in links)


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN"])
def test_infinity_or_nan_in_an_agent_is_422_and_registers_nothing(api: str, number: str) -> None:
    text = json.dumps(agent_body(name=f"inf-agent{number}")).replace(str(64 * MiB), number)
    with client(api) as c:
        r = raw_json(c, "/agents", text)
        agents = c.get("/agents").json()
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"][0]["msg"] == NON_FINITE
    assert all(not a["name"].startswith("inf-agent") for a in agents)


def test_nan_inside_a_string_is_only_text(api: str) -> None:
    with client(api) as c:
        r = c.post("/agents", json=agent_body(name="NaN-and-Infinity", volumes=[]))
    assert r.status_code == 201, r.text[:300]


def test_a_refused_body_leaves_no_token_in_the_log(api: str) -> None:
    with captured_logs() as logs, client(api) as c:
        text = json.dumps(agent_body(nics=None, api_token=AGENT_API_TOKEN))[:-1] + ', "x": NaN}'
        shaped = raw_json(c, "/agents", f"[{text}]")
        typed = c.post("/agents", json=[agent_body(api_token=AGENT_API_TOKEN)])
    assert shaped.status_code == typed.status_code == 422
    assert AGENT_API_TOKEN not in logs.text


def test_a_token_in_an_error_is_never_echoed_whatever_its_field(api: str) -> None:
    """The token given where a number goes, and as an unknown field's value."""
    with client(api) as c:
        r = c.post(
            "/links",
            json={"name": "l", "capacity_bps": AGENT_API_TOKEN, "extra": AGENT_API_TOKEN},
        )
    assert r.status_code == 422
    assert AGENT_API_TOKEN not in r.text


def test_the_upload_limit_is_its_own_setting(tmp_path: Path) -> None:
    base = settings_for(f"sqlite:///{tmp_path / 'server.db'}", tmp_path)
    small = base.model_copy(update={"max_body_bytes": 4096, "max_upload_bytes": 2 * MiB})
    with serve_in_thread(small) as url, client(url) as c:
        json_type = {"Content-Type": "application/json"}
        upload = c.post("/campaigns/results", content=b"{" + b" " * MiB + b"}", headers=json_type)
        other = c.post("/links", content=b"{" + b" " * 8192 + b"}", headers=json_type)
    assert upload.status_code == 422  # read whole: 1 MiB is under max_upload_bytes
    assert other.status_code == 413 and "4096" in other.json()["detail"]
