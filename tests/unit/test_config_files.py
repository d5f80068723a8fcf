"""Every kind of TOML file the project reads is checked against its schema: an unknown
table or key (at the top or nested), a typo'd table name and a value of the wrong TOML
type (a string ``"false"`` for a boolean, a string for a list) are refused at load with
the file, the key path and what was expected; every file shipped in config/ loads."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from reservoir import campaigns as campaign
from reservoir.agent.control.core.config import AgentSettingsError
from reservoir.agent.control.core.config import load_settings as load_agent
from reservoir.agent.target import config as target_config
from reservoir.agent.tuning import ProfileError, load_profile
from reservoir.lab import spec
from reservoir.server.app.core.config import SettingsError as ServerSettingsError
from reservoir.server.app.core.config import load_settings as load_server

CONFIG = Path(__file__).resolve().parents[2] / "config"
TOKEN = "0123456789abcdef0123"

Loader = Callable[[Path], object]


def _load_target(path: Path) -> object:
    return target_config.load(path)


def _load_tuning(path: Path) -> object:
    return load_profile(str(path))


# Each kind: where its files live under config/, its loader, and the error it raises.
KINDS: dict[str, tuple[str, Loader, type[Exception]]] = {
    "agent": ("agent*.toml", load_agent, AgentSettingsError),
    "server": ("server*.toml", load_server, ServerSettingsError),
    "target": ("target*.toml", _load_target, target_config.ConfigError),
    "lab": ("lab/*.toml", spec.load, spec.SpecError),
    "campaign": ("campaigns/*.toml", campaign.load, campaign.CampaignFileError),
    "tuning": ("tuning/*.toml", _load_tuning, ProfileError),
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The coordinator's settings also read the environment: none of it here."""
    for name in list(os.environ):
        if name.startswith("RESERVOIR_SERVER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def kind_of(path: Path) -> str | None:
    rel = path.relative_to(CONFIG)
    return next((k for k, (pattern, _, _) in KINDS.items() if rel.match(pattern)), None)


SHIPPED = sorted(CONFIG.rglob("*.toml"))


def test_every_shipped_config_file_is_of_a_kind_the_project_reads() -> None:
    assert SHIPPED
    assert [p for p in SHIPPED if kind_of(p) is None] == []
    kinds = {kind_of(p) for p in SHIPPED}
    assert {"agent", "lab", "campaign", "tuning"} <= kinds


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIG)))
def test_every_shipped_config_file_loads(path: Path) -> None:
    kind = kind_of(path)
    assert kind is not None
    KINDS[kind][1](path)


# ------------------------------------------------------------------ refusals

AGENT = f'[agent]\ntokens = ["{TOKEN}"]\nstate_dir = "s"\n'
SERVER = '[server]\nenvironment = "development"\n'
LAB = """
[[host]]
name = "a"

[[host]]
name = "b"

[[link]]
name = "l1"
a = "a"
b = "b"
a_addr = "10.201.1.1/24"
b_addr = "10.201.1.2/24"
rate_mbit = 500
"""
CAMPAIGN = """
name = "c"
description = "a campaign"

[topology]
loopback = true

[matrix]
tool = "iperf3"
streams = [1, 2]
pacing = "off"
duration_s = 10
"""
TUNING = """
description = "a profile"

[sysctl]
"net.ipv4.tcp_mtu_probing" = 1

[nic.eth1]
mtu = 1500
"""
COALESCE = '[nic.eth1.coalesce]\nadaptive-rx = "false"\n'
NIC_AS_STRING = '[nic]\ninterfaces = "eth1"\n[sysctl]'

BOGUS = "[bogus]\nx = 1\n"
# the file, the key path the error names, what it says was expected
REFUSED = {
    "agent": [
        ("unknown-table", AGENT + BOGUS, "[bogus]", "[agent]"),
        ("typo-table", AGENT + '[agnet]\nname = "a"\n', "[agnet]", "[agent]"),
        ("top-level-key", "name = 'a'\n" + AGENT, "name", "[agent]"),
        ("unknown-key", AGENT + "bogus = 1\n", "agent.bogus", "max_running"),
        ("bool-as-string", AGENT + 'nic_pacing = "false"\n', "agent.nic_pacing", "boolean"),
        ("int-as-string", AGENT + 'max_running = "4"\n', "agent.max_running", "integer"),
        ("int-as-float", AGENT + "max_running = 4.0\n", "agent.max_running", "integer"),
        ("list-as-string", AGENT.replace(f'["{TOKEN}"]', f'"{TOKEN}"'), "agent.tokens", "list"),
    ],
    "server": [
        ("unknown-table", SERVER + BOGUS, "[bogus]", "[server]"),
        ("typo-table", SERVER + '[sever]\nlisten = "h:1"\n', "[sever]", "[server]"),
        ("top-level-key", "listen = 'h:1'\n" + SERVER, "listen", "[server]"),
        ("unknown-key", SERVER + "bogus = 1\n", "server.bogus", "database_url"),
        ("number-as-string", SERVER + 'scheduler_interval = "2"\n', "interval", "number"),
        ("string-as-int", SERVER + "listen = 8470\n", "server.listen", "string"),
        ("list-as-string", SERVER + 'cors_origins = "https://a"\n', "cors_origins", "list"),
    ],
    "lab": [
        ("unknown-table", LAB + BOGUS, "bogus", "host, link, route"),
        ("typo-table", LAB + '[[hosts]]\nname = "c"\n', "hosts", "host, link, route"),
        ("unknown-nested-key", LAB + "rate_mbits = 5\n", "(l1).rate_mbits", "rate_mbit"),
        ("bool-as-string", LAB + '[[host]]\nname = "c"\nforward = "no"\n', "forward", "true"),
        ("number-as-string", LAB.replace("= 500", '= "500"'), "(l1).rate_mbit", "number"),
        ("list-as-string", LAB + '[[host]]\nname = "c"\naddrs = "a"\n', "host[2].addrs", "list"),
    ],
    "campaign": [
        ("unknown-table", CAMPAIGN + BOGUS, "bogus", "matrix"),
        ("typo-table", CAMPAIGN + "[[events]]\nat_s = 1\n", "events", "event"),
        ("unknown-nested-key", CAMPAIGN + "streem = 3\n", "matrix.streem", "streams"),
        ("unknown-key-in-list", CAMPAIGN + "exclude = [{ x = 1 }]\n", "exclude[0].x", "streams"),
        ("bool-as-string", CAMPAIGN.replace("= true", '= "true"'), "topology.loopback", "true"),
        ("int-as-string", CAMPAIGN.replace("[1, 2]", '[1, "2"]'), "streams[1]", "integer"),
    ],
    "tuning": [
        ("unknown-table", TUNING + BOGUS, "bogus", "sysctl, nic"),
        ("typo-table", TUNING + "[sysctls]\nx = 1\n", "sysctls", "sysctl, nic"),
        ("unknown-nested-key", TUNING + "mtus = 1500\n", "nic.eth1.mtus", "mtu"),
        ("int-as-string", TUNING.replace("= 1500", '= "1500"'), "nic.eth1.mtu", "integer"),
        ("bool-as-string", TUNING + COALESCE, "coalesce.adaptive-rx", "true or false"),
        ("list-as-string", TUNING.replace("[sysctl]", NIC_AS_STRING), "interfaces", "array"),
    ],
}
CASES = [
    pytest.param(kind, *case[1:], id=f"{kind}-{case[0]}")
    for kind, cases in REFUSED.items()
    for case in cases
]


@pytest.mark.parametrize(("kind", "text", "key", "expected"), CASES)
def test_a_file_with_an_unknown_key_or_a_wrong_type_is_refused_naming_file_key_and_expectation(
    kind: str, text: str, key: str, expected: str, tmp_path: Path
) -> None:
    path = tmp_path / "c.toml"  # a campaign's name is its file's
    path.write_text(text)
    loader, error = KINDS[kind][1], KINDS[kind][2]
    with pytest.raises(error) as info:
        loader(path)
    message = str(info.value)
    assert str(path) in message
    assert key in message
    assert expected in message
    assert TOKEN not in message
