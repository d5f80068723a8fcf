"""One exception tree per component, drawn where its root is declared.

Every module of the ``reservoir`` packages is imported; every exception class it
defines must derive from its component's root (:data:`ROOTS`, longest prefix wins)
and appear in the drawing of that root's module or class docstring. Each root derives
from :class:`~reservoir.common.errors.ReservoirError` and appears in its drawing.
:data:`OUTSIDE` lists the few classes outside the trees on purpose, with why.
"""

from __future__ import annotations

import importlib
import inspect
from collections import Counter
from functools import cache

import pytest
from project_modules import modules

from reservoir.common.errors import ReservoirError

ROOTS = {
    "reservoir": "reservoir.common.errors.ReservoirError",
    "reservoir.agent.iscsi": "reservoir.agent.iscsi.errors.IscsiError",
    "reservoir.agent.scsi": "reservoir.agent.scsi._sense.CheckConditionError",
    "reservoir.agent.storage": "reservoir.agent.storage._errors.StorageError",
    "reservoir.agent.target": "reservoir.agent.target.errors.TargetError",
    "reservoir.agent.initiator": "reservoir.agent.initiator._errors.InitiatorError",
    "reservoir.agent.transfer": "reservoir.agent.transfer._errors.CopyError",
    "reservoir.agent.tuning": "reservoir.agent.tuning._errors.TuningError",
    "reservoir.agent.control": "reservoir.agent.control.errors.ControlError",
    "reservoir.pacing": "reservoir.pacing.errors.PacingError",
    "reservoir.server.app": "reservoir.server.app.errors.ServerError",
    "reservoir.server.domain": "reservoir.server.domain.errors.DomainError",
    "reservoir.server.clients": "reservoir.server.clients.errors.ClientError",
    "reservoir.campaigns": "reservoir.campaigns.errors.CampaignError",
    "reservoir.lab": "reservoir.lab.errors.LabError",
}

OUTSIDE = {
    "reservoir.campaigns.run.runner.Cancelled": "SIGTERM: a BaseException that unwinds "
    "through every `except Exception` to the lab's cleanup",
    "reservoir.common.http_boundary._refusal.RefusedError": "an HTTP answer "
    "(HTTPException) the boundary sends, not an error it raises to a caller",
    "reservoir.common.http_boundary._finite_json._NonFiniteError": "private: stops the "
    "JSON parser at a NaN, turned into NonFiniteJsonError at once",
}
# alembic's migration scripts run against a live context when imported
NOT_IMPORTED = ("reservoir.server.app.migrations",)


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _resolve(path: str) -> type[BaseException]:
    module, _, name = path.rpartition(".")
    cls: type[BaseException] = getattr(importlib.import_module(module), name)
    return cls


@cache
def exceptions() -> tuple[type[BaseException], ...]:
    """Every exception class the packages define (each once, where it is defined)."""
    found: dict[str, type[BaseException]] = {}
    for name in sorted(modules()):
        if name.startswith(NOT_IMPORTED) or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                found[_name(cls)] = cls
    return tuple(found.values())


def _inside(cls: type) -> bool:
    return not any(_name(c) in OUTSIDE for c in cls.__mro__)


def component(cls: type) -> str:
    prefixes = [p for p in ROOTS if cls.__module__ == p or cls.__module__.startswith(p + ".")]
    return max(prefixes, key=len)


def drawing(root: type) -> str:
    return f"{inspect.getmodule(root).__doc__ or ''}\n{root.__doc__ or ''}"


def test_the_packages_define_the_trees_found() -> None:
    names = {_name(c) for c in exceptions()}
    assert set(ROOTS.values()) <= names
    assert set(OUTSIDE) <= names
    assert len(names) > 60


def test_every_exception_derives_from_its_components_root() -> None:
    wrong = [
        f"{_name(cls)} is not a {ROOTS[component(cls)]}"
        for cls in exceptions()
        if _inside(cls) and not issubclass(cls, _resolve(ROOTS[component(cls)]))
    ]
    assert wrong == []


def test_every_exception_is_in_its_roots_drawing() -> None:
    missing = [
        f"{_name(cls)} is not drawn in {ROOTS[component(cls)]}"
        for cls in exceptions()
        if _inside(cls) and cls.__name__ not in drawing(_resolve(ROOTS[component(cls)]))
    ]
    assert missing == []


@pytest.mark.parametrize("root", sorted(set(ROOTS.values()) - {ROOTS["reservoir"]}))
def test_every_root_is_a_reservoir_error_and_drawn_there(root: str) -> None:
    cls = _resolve(root)
    assert issubclass(cls, ReservoirError)
    assert f"+-- {cls.__name__} " in drawing(ReservoirError)


def test_no_two_exceptions_share_a_name() -> None:
    counts = Counter(cls.__name__ for cls in exceptions())
    assert [name for name, n in counts.items() if n > 1] == []


def test_a_stray_exception_is_caught() -> None:
    stray = type("StrayError", (ValueError,), {"__module__": "reservoir.agent.transfer._x"})
    assert component(stray) == "reservoir.agent.transfer"
    assert not issubclass(stray, _resolve(ROOTS[component(stray)]))
    assert stray.__name__ not in drawing(_resolve(ROOTS[component(stray)]))
