"""``reservoir campaign upload DIR_OR_RESULTS_JSON``: import a campaign run made on the
command line (``reservoir campaign run ... --out DIR``) into a coordinator, where the
dashboard shows it with its summary and report (``POST /api/v1/campaigns/results``).

    reservoir campaign upload runs/lfn-1 --coordinator http://10.0.0.1:8470 \\
        --token-file ~/.config/reservoir/token

The coordinator is ``--coordinator URL``, else ``$RESERVOIR_SERVER_URL``, else
``http://127.0.0.1:8470``; the user's token the first line of ``--token-file``, else
``$RESERVOIR_TOKEN`` (as ``reservoir transfer``). The results are checked here first
(a bad file is refused without a request, naming the field).

Exit status: 0 imported, 1 the coordinator refused (one line, then ``field: message``
lines for a 422) or cannot be reached, 2 a bad file or token file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from reservoir.campaigns.results import CampaignRun, ResultsError
from reservoir.server.clients.errors import ClientError
from reservoir.server.clients.transfer_cli import DEFAULT_SERVER, ENV_SERVER, ENV_TOKEN

__all__ = ["add_upload_parser", "upload"]

Sub = Any  # argparse's _SubParsersAction is private
PROG = "reservoir campaign upload"
TIMEOUT = 120.0  # results of a long campaign are tens of MB


class UploadError(ClientError):
    """A local problem (file, token file): exit 2."""


def add_upload_parser(csub: Sub) -> None:
    """Adds ``upload`` to the actions of ``reservoir campaign``."""
    p = csub.add_parser(
        "upload",
        help="import a campaign run's results into a coordinator (for its dashboard)",
        description="Import a campaign run's results.json into a coordinator.",
    )
    p.add_argument(
        "source",
        type=Path,
        metavar="DIR_OR_RESULTS_JSON",
        help="the run's --out folder, or its results.json",
    )
    p.add_argument(
        "--coordinator",
        metavar="URL",
        help=f"the coordinator (default ${ENV_SERVER}, else {DEFAULT_SERVER})",
    )
    p.add_argument(
        "--token-file", type=Path, metavar="F", help=f"a user's token (default ${ENV_TOKEN})"
    )
    p.add_argument("--quick", action="store_true", help="the run was of the quick subset")
    p.set_defaults(func=upload)


def upload(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        path = results_path(args.source)
        data = read_results(path)
        token = read_token(args.token_file)
    except UploadError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 2
    url = (args.coordinator or os.environ.get(ENV_SERVER) or DEFAULT_SERVER).rstrip("/")
    return post(url, token, data, quick=args.quick, out=out, err=err)


def results_path(source: Path) -> Path:
    return source / "results.json" if source.is_dir() else source


def read_results(path: Path) -> Any:
    """The JSON of ``path``, validated as campaign results (UploadError naming the field)."""

    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise UploadError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UploadError(f"{path}: not JSON: {exc}") from None
    try:
        CampaignRun.from_json(data)
    except ResultsError as exc:
        raise UploadError(f"{path}: {exc}") from None
    return data


def read_token(token_file: Path | None) -> str | None:
    if token_file is None:
        return os.environ.get(ENV_TOKEN) or None
    try:
        lines = token_file.read_text().splitlines()
    except OSError as exc:
        raise UploadError(f"{token_file}: {exc.strerror or exc}") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise UploadError(f"{token_file}: no token on its first line")
    return token


def post(url: str, token: str | None, data: Any, *, quick: bool, out: TextIO, err: TextIO) -> int:
    # Lazy: httpx and the client (0.17 s) load when something is sent, not per command.
    import httpx  # noqa: PLC0415

    from reservoir.server.clients.client import API_PREFIX, api_error  # noqa: PLC0415

    base = url if url.endswith(API_PREFIX) else url + API_PREFIX
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(
            f"{base}/campaigns/results",
            json=data,
            params={"quick": "true"} if quick else None,
            headers=headers,
            timeout=TIMEOUT,
        )
    except httpx.HTTPError as exc:
        err.write(f"{PROG}: cannot reach the coordinator at {url}: {exc}\n")
        return 1
    if response.is_error:
        first, *fields = api_error(response).lines()
        err.write(f"{PROG}: {first}\n")
        for line in fields:
            err.write(f"  {line}\n")
        return 1
    run = response.json()
    site = base.removesuffix(API_PREFIX)
    out.write(
        f"imported {run['campaign']} run {run.get('run_id')} as {run['id']} "
        f"({run['progress']['done']} runs, {run['state']})\n"
        f"dashboard: {site}/#/campaigns/{run['id']}\n"
    )
    return 0
