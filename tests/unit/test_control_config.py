"""The agent's settings and request models: refusals with clear messages."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from reservoir.agent import agent_cli
from reservoir.agent.control import AgentSettingsError, load_settings
from reservoir.agent.control.core.config import parse_listen
from reservoir.agent.control.models import CapsBase, CopyCreate

TOKEN = "0123456789abcdef0123"
EXAMPLE = Path(__file__).parents[2] / "config" / "agent.example.toml"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(body)
    return path


def test_settings_resolve_paths_relative_to_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[agent]\nname = "a"\ntokens = ["{TOKEN}"]\nstate_dir = "state"\n'
        'target_config = "t.toml"\n',
    )
    settings = load_settings(path)
    assert settings.state_dir == tmp_path / "state"
    assert settings.target_config == tmp_path / "t.toml"
    assert (settings.host, settings.port) == ("127.0.0.1", 8740)


def test_source_volumes_resolve_relative_to_the_file_and_default_to_none(
    tmp_path: Path,
) -> None:
    base = f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
    assert load_settings(write(tmp_path, base)).source_volumes == []
    path = write(tmp_path, base + 'source_volumes = ["img/a.img", "/dev/vdb"]\n')
    assert load_settings(path).source_volumes == [tmp_path / "img" / "a.img", Path("/dev/vdb")]


def test_source_volumes_must_be_a_list_of_paths(tmp_path: Path) -> None:
    base = f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
    with pytest.raises(AgentSettingsError, match=r"agent\.source_volumes"):
        load_settings(write(tmp_path, base + "source_volumes = [1]\n"))


def test_settings_refuse_to_start_without_a_token(tmp_path: Path) -> None:
    path = write(tmp_path, '[agent]\nstate_dir = "s"\n')
    with pytest.raises(AgentSettingsError, match=r"agent\.tokens: Field required"):
        load_settings(path)


def test_settings_refuse_a_short_token_without_printing_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[agent]\ntokens = ["tooshort-secret"]\nstate_dir = "s"\n')
    with pytest.raises(AgentSettingsError, match="16 characters at least") as err:
        load_settings(path)
    assert "tooshort-secret" not in str(err.value)


def test_settings_refuse_an_empty_token_list(tmp_path: Path) -> None:
    with pytest.raises(AgentSettingsError, match=r"agent\.tokens"):
        load_settings(write(tmp_path, '[agent]\ntokens = []\nstate_dir = "s"\n'))


def test_settings_need_an_agent_table(tmp_path: Path) -> None:
    with pytest.raises(AgentSettingsError, match=r"no \[agent\] table"):
        load_settings(write(tmp_path, "[server]\n"))


def test_settings_token_is_not_in_their_repr(tmp_path: Path) -> None:
    path = write(tmp_path, f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n')
    assert TOKEN not in repr(load_settings(path))


def test_settings_keep_only_the_digests_of_plain_tokens(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    path = write(tmp_path, f'[agent]\ntokens = ["{TOKEN}", "{digest}"]\nstate_dir = "s"\n')
    kept = [t.get_secret_value() for t in load_settings(path).tokens]
    assert kept == ["sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest(), digest]


@pytest.mark.parametrize("spelling", ["sha256:" + "AB" * 32, "sha256:" + "ab" * 31, "sha256:"])
def test_settings_refuse_a_malformed_digest(tmp_path: Path, spelling: str) -> None:
    path = write(tmp_path, f'[agent]\ntokens = ["{spelling}"]\nstate_dir = "s"\n')
    with pytest.raises(AgentSettingsError, match="64 lowercase hexadecimal digits"):
        load_settings(path)


def test_the_coordinator_token_file_is_relative_to_the_settings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\ncoordinator_token_file = "c.token"\n',
    )
    assert load_settings(path).coordinator_token_file == tmp_path / "c.token"


@pytest.mark.parametrize("text", ["8740", "host:", ":80", "h:99999", "h:x"])
def test_listen_address_must_be_host_and_port(text: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_listen(text)


def test_copy_request_reports_each_bad_field() -> None:
    with pytest.raises(ValidationError) as err:
        CopyCreate.model_validate(
            {"source": "", "dest": "/d", "streams": 0, "extent_size": 1000, "paths": ["x"]}
        )
    fields = {e["loc"][0] for e in err.value.errors()}
    assert fields == {"source", "streams", "extent_size", "paths"}


def test_copy_request_refuses_an_extent_below_64_kib() -> None:
    with pytest.raises(ValidationError) as err:
        CopyCreate.model_validate({"source": "/s", "dest": "/d", "extent_size": 32768})
    (error,) = err.value.errors()
    assert error["loc"] == ("extent_size",) and error["ctx"] == {"ge": 65536}
    assert CopyCreate.model_validate({"source": "/s", "dest": "/d", "extent_size": 65536})


def test_copy_request_refuses_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        CopyCreate.model_validate({"source": "/s", "dest": "/d", "stream": 2})


def test_caps_refuse_negative_rates_and_bad_interface_names() -> None:
    with pytest.raises(ValidationError) as err:
        CapsBase.model_validate(
            {"stream_pacing_rates": {"0": -1}, "nic_pacing_rates": {"../x": 10}}
        )
    assert {e["loc"][0] for e in err.value.errors()} == {
        "stream_pacing_rates",
        "nic_pacing_rates",
    }


def test_agent_serve_refuses_a_configuration_without_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, '[agent]\nstate_dir = "s"\n')
    assert agent_cli.main(["agent", "serve", "--config", str(path)]) == 2
    assert "agent.tokens: Field required" in capsys.readouterr().err


def test_example_configuration_loads() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.name == "agent-a" and settings.port == 8740
    assert settings.target_config == EXAMPLE.parent / "target.toml"


def test_tls_certificate_needs_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\ntls_cert = "a.crt"\n')
    with pytest.raises(AgentSettingsError, match="tls_cert and tls_key go together"):
        load_settings(path)


def test_warm_sessions_default_on_and_take_a_whole_number_of_seconds(tmp_path: Path) -> None:
    base = f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
    default = load_settings(write(tmp_path, base))
    assert (default.warm_sessions, default.warm_idle_timeout) == (256, 90.0)
    off = load_settings(write(tmp_path, base + "warm_sessions = 0\nwarm_idle_timeout = 60\n"))
    assert (off.warm_sessions, off.warm_idle_timeout) == (0, 60.0)
    with pytest.raises(AgentSettingsError, match=r"agent\.warm_idle_timeout"):
        load_settings(write(tmp_path, base + "warm_idle_timeout = 0\n"))


def test_jump_start_defaults_on_and_the_receive_window_is_bounded(tmp_path: Path) -> None:
    base = f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
    default = load_settings(write(tmp_path, base))
    assert (default.jump_start, default.initial_receive_window) == (True, 16 << 20)
    off = load_settings(write(tmp_path, base + "jump_start = false\ninitial_receive_window = 0\n"))
    assert (off.jump_start, off.initial_receive_window) == (False, 0)
    for bad in ("initial_receive_window = -1", "initial_receive_window = 2147483648"):
        with pytest.raises(AgentSettingsError, match=r"agent\.initial_receive_window"):
            load_settings(write(tmp_path, base + bad + "\n"))
    with pytest.raises(AgentSettingsError, match=r"agent\.jump_start"):
        load_settings(write(tmp_path, base + 'jump_start = "yes"\n'))


def test_heartbeats_need_the_coordinator_url_and_the_token_file(tmp_path: Path) -> None:
    head = f'[agent]\nname = "a"\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
    url = 'coordinator = "https://coord.example:8470"\n'
    with pytest.raises(AgentSettingsError, match="coordinator needs coordinator_token_file"):
        load_settings(write(tmp_path, head + url))
    settings = load_settings(write(tmp_path, head + url + 'coordinator_token_file = "hb"\n'))
    assert settings.coordinator_token_file == tmp_path / "hb"
    assert settings.heartbeat_interval == 15.0
    with pytest.raises(AgentSettingsError, match="coordinator"):
        load_settings(write(tmp_path, head + 'coordinator = "coord:8470"\n'))  # no scheme
    with pytest.raises(AgentSettingsError, match="heartbeat_interval"):
        load_settings(write(tmp_path, head + "heartbeat_interval = 0.1\n"))
