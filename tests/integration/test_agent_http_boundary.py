"""The agent's HTTP boundary on a real uvicorn server: a body over ``max_body_bytes`` is
refused before it is read, a request without a valid token before its body is read, a
422 echoes neither the input nor a CHAP secret, and NaN or Infinity is a 422."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reservoir.agent.control import AgentSettings

from .httpraw import captured_logs, long_string_body, send_partly
from .test_agent_api import TOKEN, client, serve_in_thread, settings_for

pytestmark = pytest.mark.integration

MiB = 1 << 20
WRONG = "wrong-token-0123456789abcdef"
SECRET = "the-chap-secret-0123456789"
NON_FINITE = "NaN and Infinity are not valid JSON numbers"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> AgentSettings:
    return settings_for(tmp_path_factory.mktemp("agent-boundary"))


@pytest.fixture(scope="module")
def api(settings: AgentSettings) -> Iterator[str]:
    with serve_in_thread(settings) as url:
        yield url


def head(method: str, path: str, token: str | None, **headers: str) -> tuple[str, dict[str, str]]:
    fields = {"Host": "127.0.0.1", "Content-Type": "application/json", **headers}
    if token is not None:
        fields["Authorization"] = f"Bearer {token}"
    return f"{method} /api/v1{path} HTTP/1.1", fields


def raw_json(c: httpx.Client, method: str, path: str, text: str) -> httpx.Response:
    return c.request(method, path, content=text, headers={"Content-Type": "application/json"})


def still_serves(api: str) -> None:
    with client(api) as c:
        assert c.get("/copies").status_code == 200


def test_a_body_declared_over_max_body_bytes_is_413_before_it_is_sent(
    api: str, settings: AgentSettings
) -> None:
    line, headers = head("POST", "/copies", TOKEN, **{"Content-Length": str(2 * MiB)})
    answer = send_partly(settings.host, settings.port, line, headers)
    assert answer.status == 413
    assert "max_body_bytes" in answer.json()["detail"]
    still_serves(api)


def test_a_refusal_before_the_body_is_a_problem_with_the_request_id(
    api: str, settings: AgentSettings
) -> None:
    fields = {"Content-Length": str(2 * MiB), "X-Request-ID": "coordinator-trace-1"}
    line, headers = head("POST", "/copies", TOKEN, **fields)
    answer = send_partly(settings.host, settings.port, line, headers)
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["x-request-id"] == "coordinator-trace-1"
    problem = answer.json()
    assert (problem["status"], problem["code"]) == (413, "body_too_large")
    assert problem["request_id"] == "coordinator-trace-1"
    assert problem["instance"] == "/api/v1/copies"


def test_a_chunked_body_over_max_body_bytes_is_413(api: str) -> None:
    body = long_string_body("source")
    with client(api) as c:
        r = c.post("/copies", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    still_serves(api)


def test_a_large_body_with_a_wrong_token_is_401_before_it_is_sent(
    api: str, settings: AgentSettings
) -> None:
    line, headers = head("POST", "/copies", WRONG, **{"Content-Length": "50000000"})
    answer = send_partly(settings.host, settings.port, line, headers, b"{" * (64 * 1024))
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    still_serves(api)


def test_a_chunked_body_without_a_token_is_401_before_it_ends(
    api: str, settings: AgentSettings
) -> None:
    line, headers = head("PUT", "/copies/x/caps", None, **{"Transfer-Encoding": "chunked"})
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"  # and no last chunk
    answer = send_partly(settings.host, settings.port, line, headers, chunk)
    assert answer.status == 401


def test_a_422_echoes_neither_the_chap_secret_nor_the_input(api: str) -> None:
    body = {
        "source": ["/tmp/" + "s" * 100_000],
        "dest": 7,
        "chap": {"user": "u", "secret": SECRET},
        "streams": "x" * 50_000,
    }
    with captured_logs() as logs, client(api) as c:
        r = c.post("/copies", json=body)
        whole = c.post("/copies", json=[body])
    assert r.status_code == whole.status_code == 422
    for answer in (r, whole):
        assert SECRET not in answer.text and "s" * 100 not in answer.text
        assert len(answer.content) < 4096
        assert all(set(e) == {"loc", "msg", "type"} for e in answer.json()["errors"])
    assert SECRET not in logs.text


def test_nan_in_caps_is_422(api: str) -> None:
    with client(api) as c:
        r = raw_json(c, "PUT", "/copies/any/caps", '{"stream_pacing_rates": {"0": NaN}}')
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"] == [{"loc": ["body"], "msg": NON_FINITE, "type": "json_invalid"}]


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN"])
def test_infinity_or_nan_in_a_copy_is_422_and_creates_nothing(
    api: str, tmp_path: Path, number: str
) -> None:
    text = json.dumps({"source": str(tmp_path / "src"), "dest": str(tmp_path / "dst")})
    with client(api) as c:
        r = raw_json(c, "POST", "/copies", text[:-1] + f', "extent_size": {number}}}')
        copies = c.get("/copies").json()
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"][0]["msg"] == NON_FINITE
    assert all(copy["source"] != str(tmp_path / "src") for copy in copies)


def test_infinity_in_an_iperf_timeout_is_422(api: str) -> None:
    with client(api) as c:
        r = raw_json(c, "POST", "/iperf/servers", '{"address": "127.0.0.1", "timeout": Infinity}')
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"][0]["msg"] == NON_FINITE


def test_the_limit_is_a_setting(tmp_path: Path) -> None:
    small = settings_for(tmp_path).model_copy(update={"max_body_bytes": 4096})
    with serve_in_thread(small) as url, client(url) as c:
        r = raw_json(c, "PUT", "/copies/x/caps", "{" + " " * 8192 + "}")
    assert r.status_code == 413 and "4096" in r.json()["detail"]
