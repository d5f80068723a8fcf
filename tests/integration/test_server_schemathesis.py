"""schemathesis against the coordinator's OpenAPI: generated requests, valid and not,
on every operation (a bounded number of cases each), never a server error."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from reservoir.server import ServerSettings, create_app

USER = "user-token-for-schemathesis-0123456789"

_DB_DIR = tempfile.TemporaryDirectory(prefix="reservoir-schemathesis-")
_SETTINGS = ServerSettings(
    database_url=f"sqlite:///{Path(_DB_DIR.name) / 'server.db'}",
    user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
    scheduler="off",  # the API alone: nothing to run transfers on
)
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app(_SETTINGS))


@pytest.fixture(scope="module", autouse=True)
def _remove_the_database() -> Iterator[None]:
    yield
    _DB_DIR.cleanup()


@schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
    response = case.call(headers={"Authorization": f"Bearer {USER}"})
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text}"
