"""Request models of the coordinator: field-level refusals and valid examples."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from reservoir.server.app.models import (
    AgentCreate,
    HeartbeatCreate,
    LinkCreate,
    TransferCreate,
    VolumeBase,
    VolumeSetCreate,
)

AGENT = "6f1c0d9e-4c7b-4c41-9d0e-5b1e0f1a2b3c"


def locs(exc: ValidationError) -> set[tuple[str | int, ...]]:
    return {tuple(e["loc"]) for e in exc.errors()}


@pytest.mark.parametrize(
    "model", [AgentCreate, HeartbeatCreate, VolumeSetCreate, LinkCreate, TransferCreate]
)
def test_openapi_examples_are_valid_requests(model: type[BaseModel]) -> None:
    examples: list[dict[str, Any]] = model.model_json_schema()["examples"]
    assert examples
    for example in examples:
        model.model_validate(example)


def test_an_api_token_is_refused_pointing_at_agent_credentials() -> None:
    example = AgentCreate.model_json_schema()["examples"][0]
    assert "api_token" not in AgentCreate.model_json_schema()["properties"]
    with pytest.raises(ValidationError, match="reservoir server agent-credentials") as info:
        AgentCreate.model_validate({**example, "api_token": "the-agents-token-0123"})
    assert "the-agents-token-0123" not in str(info.value)


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "v", "size_bytes": 4096},  # neither path nor iqn
        {"name": "v", "path": "/x", "iqn": "iqn.2026-11.org.x:t", "lun": 0, "size_bytes": 4096},
        {"name": "v", "iqn": "iqn.2026-11.org.x:t", "size_bytes": 4096},  # no lun
        {"name": "v", "path": "/x", "size_bytes": 1000},  # not whole blocks
        {"name": "v", "path": "/x", "size_bytes": 4096, "block_size": 1000},
        {"name": "v", "iqn": "not-an-iqn", "lun": 0, "size_bytes": 4096},
    ],
)
def test_bad_volumes_are_refused(volume: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        VolumeBase.model_validate(volume)


def test_stripe_unit_must_be_a_positive_multiple_of_4096() -> None:
    members = [{"agent_id": AGENT, "volume": "v0"}]
    for unit in (0, 1000, 4097, -4096):
        with pytest.raises(ValidationError) as info:
            VolumeSetCreate(name="s", members=members, stripe_unit=unit)  # type: ignore[arg-type]
        assert ("stripe_unit",) in locs(info.value)
    VolumeSetCreate(name="s", members=members, stripe_unit=8192)  # type: ignore[arg-type]


def test_a_volume_twice_in_a_set_is_refused() -> None:
    member = {"agent_id": AGENT, "volume": "v0"}
    with pytest.raises(ValidationError, match="appears twice"):
        VolumeSetCreate.model_validate({"name": "s", "members": [member, member]})


@pytest.mark.parametrize("streams", [0, 257])
def test_streams_per_pair_is_1_to_256(streams: int) -> None:
    with pytest.raises(ValidationError) as info:
        TransferCreate(source="a", destination="b", streams_per_pair=streams)
    assert ("streams_per_pair",) in locs(info.value)


def test_transfer_refuses_unknown_pacing_and_same_set() -> None:
    with pytest.raises(ValidationError) as info:
        TransferCreate.model_validate(
            {"source": "a", "destination": "b", "pacing": {"policy": "fast", "margin": 2}}
        )
    assert {("pacing", "policy"), ("pacing", "margin")} <= locs(info.value)
    with pytest.raises(ValidationError, match="same volume set"):
        TransferCreate(source="a", destination="a")


def test_transfer_verification_is_storage_unless_receipt_is_asked() -> None:
    assert TransferCreate(source="a", destination="b").verification == "storage"
    body = {"source": "a", "destination": "b", "verification": "receipt"}
    assert TransferCreate.model_validate(body).verification == "receipt"
    with pytest.raises(ValidationError) as info:
        TransferCreate.model_validate({**body, "verification": "read-back"})
    assert locs(info.value) == {("verification",)}


def test_a_link_joins_two_different_agents() -> None:
    with pytest.raises(ValidationError, match="two different agents"):
        LinkCreate.model_validate(
            {
                "name": "l",
                "agent_a": AGENT,
                "nic_a": "eth0",
                "agent_b": AGENT,
                "nic_b": "eth1",
                "capacity_bps": 1,
                "rtt_ms": 1,
            }
        )


def test_duplicate_nic_names_are_refused() -> None:
    nic = {"name": "eth0", "address": "10.0.0.1", "speed_bps": 1}
    with pytest.raises(ValidationError) as info:
        AgentCreate.model_validate({"name": "a", "control_url": "http://h:1", "nics": [nic, nic]})
    assert ("nics",) in locs(info.value)
