"""The modules of the ``reservoir`` packages, found as the wheel lays them out: through
pyproject.toml's package-dir mapping (read by the layer and error-tree tests)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


@cache
def modules() -> dict[str, Path]:
    """Every module of the mapped packages: dotted name -> file."""
    with open(PROJECT / "pyproject.toml", "rb") as f:
        roots = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in roots.items():
        base = PROJECT / folder
        for file in base.rglob("*.py"):
            if "node_modules" in file.parts:
                continue
            parts = list(file.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = file
    return found
