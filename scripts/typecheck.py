"""mypy strict over the ``reservoir`` package as it installs, with the project's own paths.

pyproject.toml maps the import packages onto the project's folders (``reservoir.agent``
is agent/). An editable install resolves that with an import hook, which mypy does not
follow, so this script lays the package out as a wheel would under build/typecheck/
(links to the folders, rebuilt every run), runs mypy on it and on tests/, and prints
mypy's report with the paths of the checkout (agent/x.py, not build/typecheck/...).
Exit status: mypy's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "typecheck"


def package_dirs() -> dict[str, str]:
    """pyproject.toml's import package -> folder mapping."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["setuptools"]["package-dir"])


def lay_out() -> dict[str, str]:
    """Builds the view; returns view-relative prefixes -> checkout-relative prefixes."""
    shutil.rmtree(VIEW, ignore_errors=True)
    prefixes = {}
    for name, folder in sorted(package_dirs().items()):
        where = VIEW.joinpath(*name.split("."))
        if name == "reservoir":
            where.mkdir(parents=True)
            for entry in (ROOT / folder).iterdir():
                if entry.name != "__pycache__":
                    (where / entry.name).symlink_to(entry)
        else:
            where.symlink_to(ROOT / folder, target_is_directory=True)
        prefixes[str(where.relative_to(ROOT)) + "/"] = folder + "/"
    return prefixes


def main() -> int:
    prefixes = lay_out()
    env = dict(os.environ, MYPYPATH=str(VIEW))
    cmd = [sys.executable, "-m", "mypy", str(VIEW / "reservoir"), "tests", *sys.argv[1:]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    longest_first = sorted(prefixes.items(), key=lambda kv: -len(kv[0]))
    for line in (proc.stdout + proc.stderr).splitlines():
        said = line
        for view, real in longest_first:
            said = said.replace(view, real)
        print(said)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
