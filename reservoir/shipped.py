"""What Reservoir ships beside its code, found through :mod:`importlib.resources`.

The same calls work from a checkout (an editable install maps ``reservoir.config``
onto config/ and ``reservoir.web`` onto web/) and from an installed wheel (where they
are package data under ``reservoir/``); nothing walks up from a source file.

- :func:`config_dir`: config/, with tuning/ (host tuning profiles), campaigns/ and
  lab/ (the lab topologies campaigns and benchmarks run on).
- :func:`data_root`: the folder holding config/. Paths written in shipped files
  (a campaign's ``lab = "config/lab/NAME.toml"``) are relative to it.
- :func:`dashboard_dir`: web/dist, the built dashboard the coordinator serves.
- :func:`source`: a C source built at run time (the BPF program, the delay line).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from reservoir.common.errors import ReservoirError

__all__ = ["ShippedError", "config_dir", "dashboard_dir", "data_root", "source"]


class ShippedError(ReservoirError):
    """The package's data is not where an installed package keeps it."""


def _folder(package: str, *parts: str) -> Path:
    """A path inside ``package``'s installed folder (a real file system path)."""
    where = files(package).joinpath(*parts)
    if not isinstance(where, Path):
        raise ShippedError(f"{package} is not installed as files ({where!r}): reinstall it")
    return where


def config_dir() -> Path:
    """config/: tuning profiles, campaigns, lab topologies, example files."""
    return _folder("reservoir.config")


def data_root() -> Path:
    """The folder holding config/: what relative paths in shipped files start from."""
    return config_dir().parent


def dashboard_dir() -> Path:
    """web/dist: the built dashboard (absent until ``npm run build`` made it)."""
    return _folder("reservoir.web", "dist")


def source(package: str, *parts: str) -> Path:
    """A source file shipped in ``package`` (``source("reservoir.pacing", "bpf", F)``)."""
    return _folder(package, *parts)
