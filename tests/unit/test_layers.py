"""The layers of the README's drawing, kept true over the import graph.

Every module of the ``reservoir`` packages (found through pyproject.toml's package-dir
mapping, as the wheel lays them out) is read with :mod:`ast`; every import, at the top
or inside a function, is an edge. An edge may not:

- go up: from a module to one of a higher layer (:data:`LAYERS`);
- leave the coordinator for the agent: ``reservoir.server`` talks to agents over HTTP
  and never imports ``reservoir.agent`` or ``reservoir.pacing``;
- reach into another package's private module (``x._y`` from outside ``x``).

:data:`KNOWN` lists the edges that still break a rule, each with what removes it; the
last test fails when one of them is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from project_modules import PROJECT, modules

# Longest prefix wins. 1 wire, disk and shared pieces; 2 roles on a host; 3 the
# transfer engine; 4 services (the agent's control API, the coordinator: its records
# 4.0, its domain 4.1, its API and services 4.2); 5 clients and tools (every CLI, the
# lab, campaigns, benchmarks).
LAYERS: dict[str, float] = {
    "reservoir": 1,
    "reservoir.shipped": 1,
    "reservoir.common": 1,
    "reservoir.config": 1,
    "reservoir.web": 1,
    "reservoir.agent": 1,
    "reservoir.agent.iscsi": 1,
    "reservoir.agent.scsi": 1,
    "reservoir.agent.storage": 1,
    "reservoir.agent.telemetry": 1,
    "reservoir.agent.buffers": 1,
    "reservoir.agent.target": 2,
    "reservoir.agent.initiator": 2,
    "reservoir.agent.tuning": 2,
    "reservoir.pacing": 2,
    "reservoir.agent.transfer": 3,
    "reservoir.agent.paths": 3,
    "reservoir.agent.control": 4,
    "reservoir.server": 4.2,  # its __init__ is the coordinator's entry (main, serve)
    "reservoir.server.app": 4.2,
    "reservoir.server.app.core": 4.0,
    "reservoir.server.app.db": 4.0,
    "reservoir.server.app.tables": 4.0,
    "reservoir.server.app.models": 4.0,
    "reservoir.server.app.campaign_models": 4.0,
    "reservoir.server.app.errors": 4.0,
    "reservoir.server.app.events": 4.0,
    "reservoir.server.app.leg_summary": 4.0,  # what a leg's copy summary says (events, CLI)
    "reservoir.server.app.webhooks": 4.0,  # deliveries queued with a state's change (events)
    "reservoir.server.app.agent_client": 4.0,
    "reservoir.server.domain": 4.1,
    "reservoir.server.clients": 5,
    "reservoir.cli": 5,
    "reservoir.completion": 5,  # written from reservoir.cli's whole parser
    "reservoir.__main__": 5,
    "reservoir.lab": 5,
    "reservoir.lab.spec": 3,  # a lab's description, parsed: what campaigns are built on
    "reservoir.lab.errors": 3,  # the lab's error tree, raised by the spec too
    "reservoir.campaigns": 3,  # campaigns, their results and reports
    "reservoir.campaigns.run": 5,
    "reservoir.campaigns.cli": 5,
    "reservoir.campaigns.bench": 5,
    "reservoir.agent.agent_cli": 5,
    "reservoir.agent.target.cli": 5,
    "reservoir.agent.transfer.cli": 5,
    "reservoir.agent.tuning.cli": 5,
    "reservoir.agent.storage.bench": 5,
}
AGENT_SIDE = ("reservoir.agent", "reservoir.pacing")

# (importer, imported) module prefixes that still break a rule, and what removes them.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line})"


def _known_module(name: str) -> str | None:
    """The longest prefix of ``name`` that is a module (``pkg.mod.Class`` -> ``pkg.mod``)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if modules()[module].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    for alias in node.names:  # ``from pkg import mod`` imports mod; ``from mod import x``, mod
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in modules() else base


@cache
def edges() -> tuple[Edge, ...]:
    """Every import of a project module by a project module (deduplicated per line)."""
    out = set()
    for module, file in modules().items():
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(module, node):
                found = _known_module(target)
                if found and found != module:
                    out.add(Edge(module, found, node.lineno))
    return tuple(sorted(out, key=lambda e: (e.importer, e.imported, e.line)))


def _prefix_of(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer(module: str) -> float:
    best = max((p for p in LAYERS if _prefix_of(module, p)), key=len)
    return LAYERS[best]


def _private_owner(imported: str) -> str | None:
    """The package whose private module ``imported`` is (``a.b._c`` -> ``a.b``)."""
    parts = imported.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def broken_rule(edge: Edge) -> str | None:
    if layer(edge.imported) > layer(edge.importer):
        return f"goes up from layer {layer(edge.importer)} to {layer(edge.imported)}"
    if _prefix_of(edge.importer, "reservoir.server") and any(
        _prefix_of(edge.imported, side) for side in AGENT_SIDE
    ):
        return "the coordinator imports agent code"
    owner = _private_owner(edge.imported)
    if owner is not None and not _prefix_of(edge.importer, owner):
        return f"reaches into a private module of {owner}"
    return None


def _known(edge: Edge) -> bool:
    return any(_prefix_of(edge.importer, a) and _prefix_of(edge.imported, b) for a, b in KNOWN)


def test_the_graph_is_read_from_the_mapped_folders() -> None:
    names = modules()
    assert modules()["reservoir.agent.target.server"] == PROJECT / "agent/target/server.py"
    assert names["reservoir.pacing.caps"] == PROJECT / "kmod-pacing/pacing/caps.py"
    found = {(e.importer, e.imported) for e in edges()}
    assert ("reservoir.agent.transfer._engine", "reservoir.agent.initiator") in found
    assert ("reservoir.agent.target.connection", "reservoir.agent.iscsi.pdu") in found  # an alias


def test_every_module_has_a_layer() -> None:
    for module in modules():
        assert 1 <= layer(module) <= 5, module


def test_imports_follow_the_layers() -> None:
    broken = [f"{e}: {why}" for e in edges() if (why := broken_rule(e)) and not _known(e)]
    assert broken == []


def test_every_known_exception_still_exists() -> None:
    still = {(a, b) for a, b in KNOWN if any(
        _prefix_of(e.importer, a) and _prefix_of(e.imported, b) and broken_rule(e)
        for e in edges()
    )}  # fmt: skip
    assert set(KNOWN) - still == set(), "remove the fixed exceptions from KNOWN"


def test_a_wrong_way_import_is_caught() -> None:
    assert broken_rule(Edge("reservoir.agent.iscsi.pdu", "reservoir.agent.target.server", 1))
    assert broken_rule(Edge("reservoir.server.domain.scheduler", "reservoir.agent.iscsi.pdu", 1))
    assert broken_rule(Edge("reservoir.server.domain.probe", "reservoir.server.app.main", 1))
    assert broken_rule(Edge("reservoir.server.app.main", "reservoir.server.clients.client", 1))
    assert broken_rule(Edge("reservoir.lab.demo", "reservoir.agent.transfer._engine", 1))
    assert (
        broken_rule(Edge("reservoir.agent.transfer._plan", "reservoir.agent.transfer._x", 1))
        is None
    )
    assert broken_rule(Edge("reservoir.lab.demo", "reservoir.agent.transfer", 1)) is None
