"""``reservoir transfer``: arguments, tables and progress lines, and the client's error
translation, over an in-memory transport (httpx.MockTransport)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable, Iterator
from typing import Any, get_args

import httpx
import pytest

from reservoir.cli import build_parser
from reservoir.server.app.models import TransferCreate, TransferEventPublic, TransferPublic
from reservoir.server.clients import client as client_mod
from reservoir.server.clients import transfer_cli as tc
from reservoir.server.clients.client import (
    ApiError,
    CoordinatorClient,
    UnexpectedAnswerError,
    UnreachableError,
)

MiB = 1 << 20
TOKEN = "unit-user-token-0123456789abcdef"
TID = "0b7e3a55-1f0d-4f4a-8c43-9a8e7d6c5b4a"
Json = dict[str, Any]
Handler = Callable[[httpx.Request], httpx.Response]


def transfer_json(state: str = "running", legs: tuple[str, ...] = ("running", "running")) -> Json:
    return {
        "id": TID,
        "source": "set-a",
        "destination": "set-b",
        "streams_per_pair": 8,
        "paths": ["link-1"],
        "pacing": {"policy": "per-nic", "margin": 0.05},
        "equalizer": True,
        "verify": True,
        "state": state,
        "total_bytes": 64 * MiB * len(legs),
        "legs": [
            {
                "index": i,
                "source_agent": f"agent-a{i}",
                "source_volume": "vol0",
                "dest_agent": f"agent-b{i}",
                "dest_volume": "vol0",
                "bytes": 64 * MiB,
                "streams": 8,
                "paths": ["link-1"],
                "state": leg,
            }
            for i, leg in enumerate(legs)
        ],
        "created_at": "2026-11-21T10:00:00Z",
        "updated_at": "2026-11-21T10:00:05Z",
    }


def transfer(
    state: str = "running", legs: tuple[str, ...] = ("running", "running")
) -> TransferPublic:
    return TransferPublic.model_validate(transfer_json(state, legs))


def mock_client(handler: Handler, token: str | None = TOKEN) -> CoordinatorClient:
    return CoordinatorClient(
        "http://coordinator.test:8470", token, transport=httpx.MockTransport(handler)
    )


def answer(status: int, body: object) -> Handler:
    return lambda request: httpx.Response(status, json=body)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transfer", *argv])


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


# ---------------------------------------------------------------- arguments


def test_start_takes_every_option() -> None:
    args = parse(
        "start", "--from", "src", "--to", "dst", "--streams", "16", "--path", "l0",
        "--path", "l1", "--pacing", "per-socket", "--margin", "0.1", "--no-equalizer",
        "--no-verify", "--watch",
    )  # fmt: skip
    assert (args.action, args.source, args.dest, args.streams) == ("start", "src", "dst", 16)
    assert args.paths == ["l0", "l1"] and args.pacing == "per-socket" and args.margin == 0.1
    assert args.equalizer is False and args.no_verify and args.watch


def test_start_leaves_unset_options_to_the_server() -> None:
    args = parse("start", "--from", "src", "--to", "dst")
    assert (args.streams, args.pacing, args.margin, args.equalizer) == (None, None, None, None)
    assert args.paths == [] and not args.no_verify and not args.watch
    assert args.verification is None
    assert "verification" not in tc._transfer_body(args, "a", "b", []).model_fields_set


@pytest.mark.parametrize("mode", ["storage", "receipt"])
def test_start_verify_names_the_mode_of_the_body(mode: str) -> None:
    args = parse("start", "--from", "src", "--to", "dst", "--verify", mode)
    body = tc._transfer_body(args, "a", "b", [])
    assert (body.verify, body.verification) == (True, mode)


def test_the_clis_modes_are_the_models() -> None:
    annotation = TransferCreate.model_fields["verification"].annotation
    assert get_args(annotation) == tc.VERIFICATIONS


def test_no_verify_and_verify_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("start", "--from", "a", "--to", "b", "--no-verify", "--verify", "receipt")
    assert exc.value.code == 2
    assert "argument --verify: not allowed with argument --no-verify" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--server", "http://x:1", "--token", "t", "--json", "list"],
        ["list", "--server", "http://x:1", "--token", "t", "--json"],
    ],
)
def test_global_options_go_before_or_after_the_action(argv: list[str]) -> None:
    args = parse(*argv)
    assert tc.connection(args) == ("http://x:1", "t") and args.json


def test_server_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tc.ENV_SERVER, "http://env:9")
    monkeypatch.setenv(tc.ENV_TOKEN, "env-token")
    assert tc.connection(parse("list")) == ("http://env:9", "env-token")
    assert tc.connection(parse("--server", "http://opt:1", "list"))[0] == "http://opt:1"


def test_server_defaults_to_the_local_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tc.ENV_SERVER, raising=False)
    monkeypatch.delenv(tc.ENV_TOKEN, raising=False)
    assert tc.connection(parse("list")) == ("http://127.0.0.1:8470", None)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["start", "--to", "dst"],
        ["start", "--from", "a", "--to", "b", "--pacing", "fast"],
        ["start", "--from", "a", "--to", "b", "--streams", "0"],
        ["start", "--from", "a", "--to", "b", "--verify", "read-back"],
        ["status"],
        ["watch", TID, "--interval", "0"],
        ["frobnicate", TID],
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert "usage: reservoir transfer" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "source", "line"),
    [
        (["--margin", "2"], "set-b", "pacing.margin: Input should be less than 1"),
        ([], "set-a", "source and destination are the same volume set"),
    ],
)
def test_arguments_the_model_refuses_are_usage_errors_with_the_field(
    extra: list[str], source: str, line: str
) -> None:
    args = parse("start", "--from", "s", "--to", "d", *extra)
    with pytest.raises(tc.UsageError) as exc:
        tc._transfer_body(args, source, "set-a", [])
    assert str(exc.value).splitlines() == [line]


# ---------------------------------------------------------------- formatting


def test_table_columns_are_aligned_without_trailing_blanks() -> None:
    lines = tc.format_table(["ID", "STATE"], [["a", "queued"], ["bbbb", "-"]])
    assert lines == ["ID    STATE", "a     queued", "bbbb  -"]


def test_list_shows_progress_and_dashes_for_rate_and_eta() -> None:
    lines = tc.format_list([transfer("running", ("completed", "running"))])
    head = ["ID", "STATE", "PROGRESS", "RATE", "ETA", "VERIFY", "CREATED", "(UTC)"]
    assert lines[0].split() == head
    assert lines[1].split() == [
        TID,
        "running",
        "50%",
        "-",
        "-",
        "storage",
        "2026-11-21",
        "10:00:00",
    ]


def test_list_says_how_each_transfer_is_verified() -> None:
    receipt = TransferPublic.model_validate({**transfer_json(), "verification": "receipt"})
    unverified = TransferPublic.model_validate({**transfer_json(), "verify": False})
    assert [ln.split()[5] for ln in tc.format_list([receipt, unverified])[1:]] == [
        "receipt",
        "off",
    ]


def test_list_of_nothing_says_so() -> None:
    assert tc.format_list([]) == ["no transfers"]


def test_progress_is_the_completed_legs_then_everything() -> None:
    assert tc.done_bytes(transfer("running", ("running", "running"))) == 0
    assert tc.done_bytes(transfer("running", ("completed", "running"))) == 64 * MiB
    assert tc.done_bytes(transfer("completed", ("running", "running"))) == 128 * MiB
    assert tc.percent(transfer("completed")) == "100%"


def test_progress_takes_the_apis_done_bytes() -> None:
    body = transfer_json("running", ("running", "running"))
    body["legs"][0]["done_bytes"] = 16 * MiB
    assert tc.done_bytes(TransferPublic.model_validate(body)) == 16 * MiB
    body["done_bytes"] = 32 * MiB
    assert tc.done_bytes(TransferPublic.model_validate(body)) == 32 * MiB
    assert tc.percent(TransferPublic.model_validate(body)) == "25%"


def test_watch_says_why_a_transfer_failed() -> None:
    out = io.StringIO()
    failed = transfer_json("failed") | {"last_error": "leg 1: the target refused the login"}
    assert run_watch(replay(failed), out) == 1
    assert out.getvalue().splitlines()[-1] == "error: leg 1: the target refused the login"


def test_progress_line_has_bar_rate_eta_legs_and_state() -> None:
    line = tc.format_progress_line(transfer("running", ("completed", "running")), 2e6, 95)
    assert line.startswith("[" + "#" * 12 + "-" * 12 + "]  50%")
    assert "64.0 MiB / 128.0 MiB" in line and "2.0 MB/s" in line and "ETA 1m35s" in line
    assert line.endswith("legs 1/2 up  running")


def test_progress_line_says_how_many_legs_wait_to_be_resumed() -> None:
    data = transfer_json("running", ("running", "running"))
    data["legs"][1]["last_error"] = "destination LUN 1 of iqn.x: nothing listens at ..."
    line = tc.format_progress_line(TransferPublic.model_validate(data), None, None)
    assert line.endswith("legs 1/2 up  running, 1 retrying")


def test_progress_line_without_a_rate_shows_dashes() -> None:
    line = tc.format_progress_line(transfer("queued", ("queued",)), None, None)
    assert "  -  ETA -  legs 0/1 up  queued" in line


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (0, "0s"), (59.4, "59s"), (61, "1m01s"), (7322, "2h02m")]
)
def test_eta_is_short(seconds: float | None, text: str) -> None:
    assert tc.human_eta(seconds) == text


def test_rate_comes_from_successive_samples() -> None:
    meter = tc.RateMeter(window=10)
    rates, etas = [], []
    for at, done in [(0.0, 0), (2.0, 4 * MiB), *((float(t), 4 * MiB) for t in range(3, 30))]:
        meter.add(at, done)  # then stalled: the older samples age out
        rates.append(meter.rate)
        etas.append(meter.eta(6 * MiB))
    assert rates[:2] == [None, 2 * MiB] and etas[:2] == [None, 3.0]
    assert rates[-1] == 0.0 and etas[-1] is None


def test_status_shows_names_legs_and_events() -> None:
    t = transfer("paused", ("paused", "paused"))
    event = {
        "id": 1,
        "at": "2026-11-21T10:00:05Z",
        "kind": "state",
        "from_state": "queued",
        "to_state": "paused",
        "detail": "paused by a user",
    }
    lines = tc.format_status(
        t,
        {"set-a": "site-a", "set-b": "site-b"},
        {"agent-a0": "a0", "agent-b0": "b0"},
        {"link-1": "lfn"},
        [TransferEventPublic.model_validate(event)],
    )
    text = "\n".join(lines)
    assert lines[0] == f"transfer {TID}: paused"
    assert "site-a -> site-b" in text and "equalizer on; verify on (storage)" in text
    assert any(ln.split()[:3] == ["0", "a0:vol0", "b0:vol0"] and "lfn" in ln for ln in lines)
    assert any(ln.split()[:2] == ["1", "agent-a1:vol0"] for ln in lines)  # unknown: the id
    assert "queued -> paused  paused by a user" in text


def test_status_says_how_the_transfer_is_verified() -> None:
    t = TransferPublic.model_validate({**transfer_json(), "verification": "receipt"})
    assert "verify on (receipt)" in "\n".join(tc.format_status(t, {}, {}, {}, []))
    t = TransferPublic.model_validate({**transfer_json(), "verify": False})
    assert "verify off" in "\n".join(tc.format_status(t, {}, {}, {}, []))


def test_status_says_whether_each_completed_leg_was_verified_and_when_it_was_not_held() -> None:
    data = transfer_json("running", ("completed", "completed", "running"))
    lapse = "destination LUN 0 of iqn.x: not held from 1.20 s to 4.50 s (the target restarted)"
    data["legs"][0]["summary"] = {"verified": True, "mode": "receipt", "hold_lapses": [lapse]}
    data["legs"][1]["summary"] = {"verified": False, "mode": ""}
    lines = tc.format_status(TransferPublic.model_validate(data), {}, {}, {}, [])
    header = next(ln for ln in lines if ln.startswith("LEG "))
    assert header.split()[-1] == "VERIFICATION"
    rows = {ln.split()[0]: ln for ln in lines if ln[:1].isdigit()}
    assert rows["0"].endswith("completed  verified (receipt)")
    assert rows["1"].endswith("completed  not verified")
    assert rows["2"].endswith("running    -")
    assert (
        f"  leg 0: {lapse}: other initiators could write the destination then (the end "
        "check hashed all of it after)" in lines
    )
    assert not any(ln.startswith("  leg 1:") for ln in lines)


# ---------------------------------------------------------------- the client's errors


def test_an_error_status_carries_the_status_and_the_message() -> None:
    with mock_client(answer(404, {"detail": "no transfer 'x'"})) as c, pytest.raises(ApiError) as e:
        c.transfer("x")
    assert e.value.status == 404 and e.value.message == "no transfer 'x'"
    assert str(e.value) == "HTTP 404 Not Found: no transfer 'x'"


def test_field_errors_of_a_422_become_field_path_lines() -> None:
    detail = [
        {"loc": ["body", "streams_per_pair"], "msg": "Input should be >= 1", "type": "x"},
        {"loc": ["body", "pacing", "margin"], "msg": "Value error, too big", "type": "x"},
        {"loc": ["body"], "msg": "whole body", "type": "x"},
    ]
    with mock_client(answer(422, {"detail": detail})) as c, pytest.raises(ApiError) as e:
        c.transfers()
    assert e.value.lines() == [
        "HTTP 422 Unprocessable Entity: invalid request",
        "streams_per_pair: Input should be >= 1",
        "pacing.margin: too big",
        "whole body",
    ]


def test_an_error_without_a_json_body_still_says_what_happened() -> None:
    handler: Handler = lambda request: httpx.Response(502, text="Bad gateway\nnginx")  # noqa: E731
    with mock_client(handler) as c, pytest.raises(ApiError) as e:
        c.transfers()
    assert str(e.value) == "HTTP 502 Bad Gateway: Bad gateway"


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def time_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def test_a_refused_connection_says_the_coordinator_cannot_be_reached() -> None:
    with mock_client(refuse) as c, pytest.raises(UnreachableError) as e:
        c.transfers()
    assert str(e.value) == (
        "cannot reach the coordinator at http://coordinator.test:8470 (connection refused)"
    )
    assert isinstance(e.value.__cause__, httpx.ConnectError)


def test_a_timeout_says_how_long_it_waited() -> None:
    with mock_client(time_out) as c, pytest.raises(UnreachableError, match="within 10 s"):
        c.transfers()


def test_an_answer_of_the_wrong_shape_is_unexpected() -> None:
    with mock_client(answer(200, [{"id": 1}])) as c, pytest.raises(UnexpectedAnswerError):
        c.transfers()


def test_the_token_goes_in_the_header_and_the_path_is_quoted() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=transfer_json())

    with mock_client(handler) as c:
        c.act("../agents", "pause")
    assert seen[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert seen[0].url.raw_path == b"/api/v1/transfers/..%2Fagents/pause"


# ---------------------------------------------------------------- watch and main


def replay(*states: Json) -> Handler:
    answers: Iterator[Json] = iter(states)
    return lambda request: httpx.Response(200, json=next(answers))


def run_watch(handler: Handler, out: io.StringIO, as_json: bool = False) -> int:
    ticks = iter(range(0, 1000, 2))
    with mock_client(handler) as c:
        return tc.watch(
            c, TID, out, as_json=as_json, clock=lambda: float(next(ticks)), sleep=lambda s: None
        )


def test_watch_exits_0_on_completion_with_a_rate_from_its_samples() -> None:
    out = io.StringIO()
    rc = run_watch(
        replay(
            transfer_json("running", ("running", "running")),
            transfer_json("running", ("completed", "running")),
            transfer_json("completed", ("completed", "completed")),
        ),
        out,
    )
    lines = out.getvalue().splitlines()
    assert rc == 0 and len(lines) == 3
    assert "  -  ETA -  legs 2/2 up  running" in lines[0]
    assert "16.8 MB/s  ETA 4s  legs 1/2 up  running" in lines[1]  # 64 MiB in 4 s
    assert lines[2].endswith("legs 0/2 up  completed") and "100%" in lines[2]


@pytest.mark.parametrize("final", ["cancelled", "failed"])
def test_watch_exits_1_when_the_transfer_ends_otherwise(final: str) -> None:
    out = io.StringIO()
    assert run_watch(replay(transfer_json("queued"), transfer_json(final)), out) == 1
    assert out.getvalue().splitlines()[-1].endswith(final)


def test_watch_redraws_one_line_on_a_terminal() -> None:
    out = Tty()
    run_watch(replay(transfer_json("running"), transfer_json("completed")), out)
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 2 and text.endswith("completed\n") and text.count("\n") == 1


def test_watch_json_writes_one_record_per_sample() -> None:
    out = io.StringIO()
    run_watch(replay(transfer_json("queued"), transfer_json("completed")), out, as_json=True)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["state"] for r in records] == ["queued", "completed"]
    assert records[1]["done_bytes"] == records[1]["total_bytes"] == 128 * MiB
    assert records[1]["bytes_per_second"] == 64 * MiB and records[0]["eta_seconds"] is None


def run_main(monkeypatch: pytest.MonkeyPatch, handler: Handler, *argv: str) -> tuple[int, str, str]:
    def make(url: str, token: str | None = None) -> CoordinatorClient:
        # the class imported above: a second call finds client_mod's replaced
        return CoordinatorClient(url, token, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(client_mod, "CoordinatorClient", make)
    out, err = io.StringIO(), io.StringIO()
    rc = tc.main(parse("--server", "http://coordinator.test:8470", *argv), out, err)
    return rc, out.getvalue(), err.getvalue()


def test_main_prints_an_api_error_on_one_line_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = {"detail": f"transfer '{TID}': cannot pause a transfer that is paused"}
    rc, out, err = run_main(monkeypatch, answer(409, body), "pause", TID)
    assert (rc, out) == (1, "")
    assert err == f"reservoir transfer pause: HTTP 409 Conflict: {body['detail']}\n"


def test_main_start_resolves_names_and_prints_the_id_and_legs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted: list[Json] = []
    member = {"agent_id": "agent-a0", "agent_name": "a0", "volume": "vol0", "size_bytes": MiB}
    sets = [
        {"id": sid, "name": name, "members": [member], "stripe_unit": MiB,
         "capacity_bytes": MiB, "created_at": "2026-11-21T10:00:00Z"}
        for sid, name in (("set-a", "site-a"), ("set-b", "site-b"))
    ]  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=sets)
        posted.append(json.loads(request.content))
        return httpx.Response(201, json=transfer_json("queued", ("queued", "queued")))

    rc, out, _ = run_main(
        monkeypatch, handler, "start", "--from", "site-a", "--to", "set-b", "--streams", "4"
    )
    assert rc == 0 and out.splitlines()[0] == f"transfer {TID} queued: 2 legs, 128.0 MiB"
    assert out.splitlines()[2].split()[:3] == ["0", "a0:vol0", "agent-b0:vol0"]
    assert posted[0]["source"] == "set-a" and posted[0]["destination"] == "set-b"
    assert posted[0]["streams_per_pair"] == 4 and posted[0]["pacing"]["policy"] == "per-nic"


def test_a_transfer_is_named_by_the_first_characters_of_its_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = "0b7e9999-0000-4000-8000-000000000000"  # shares 4 characters with TID
    acted: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/transfers":
            return httpx.Response(200, json=[transfer_json(), {**transfer_json(), "id": other}])
        acted.append(request.url.path)
        return httpx.Response(200, json=transfer_json("paused", ("paused", "paused")))

    rc, out, _ = run_main(monkeypatch, handler, "pause", TID[:8])
    assert (rc, out, acted) == (0, f"transfer {TID}: paused\n", [f"/api/v1/transfers/{TID}/pause"])
    rc, _, err = run_main(monkeypatch, handler, "pause", TID[:4])
    assert rc == 1 and acted == [f"/api/v1/transfers/{TID}/pause"]  # nothing paused
    assert f"2 transfers have ids starting with '0b7e' ({TID}, {other}): give more" in err
    rc, _, err = run_main(monkeypatch, handler, "cancel", "0b7")
    assert rc == 1 and "'0b7': give a transfer's id, or 4 characters of it" in err
    rc, _, err = run_main(monkeypatch, handler, "status", "ffff")
    assert rc == 1 and "no transfer on the coordinator has an id starting with 'ffff'" in err
    run_main(monkeypatch, handler, "pause", "not-an-id")  # no part of an id: asked as it is
    assert acted[-1] == "/api/v1/transfers/not-an-id/pause"
    assert len(acted) == 2


def test_main_start_with_an_unknown_set_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    rc, _, err = run_main(monkeypatch, answer(200, []), "start", "--from", "x", "--to", "y")
    assert rc == 1
    assert err == (
        "reservoir transfer start: no volume set named 'x' (or with that id) on the coordinator\n"
    )


def test_a_lost_answer_sends_the_request_again_with_the_same_idempotency_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_mod, "RETRY_DELAY_S", 0.0)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ReadTimeout("no answer", request=request)
        return httpx.Response(200, json=transfer_json("queued"))

    body = TransferCreate(source="set-a", destination="set-b")
    with mock_client(handler) as c:
        assert c.create_transfer(body).id == TID
    keys = [r.headers["idempotency-key"] for r in seen]
    assert len(keys) == 2 and keys[0] == keys[1] and len(keys[0]) == 36  # one UUID


def test_the_idempotency_key_given_is_the_one_sent_and_three_failures_are_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_mod, "RETRY_DELAY_S", 0.0)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["idempotency-key"])
        raise httpx.ConnectError("refused", request=request)

    body = TransferCreate(source="set-a", destination="set-b")
    args = parse("start", "--from", "src", "--to", "dst", "--idempotency-key", "nightly-42")
    with mock_client(handler) as c, pytest.raises(UnreachableError, match="cannot reach"):
        c.create_transfer(body, args.idempotency_key)
    assert seen == ["nightly-42"] * 3


def test_the_list_shows_the_apis_rate_and_eta_of_a_running_transfer() -> None:
    running = TransferPublic.model_validate(
        {**transfer_json("running"), "rate_bps": 800e6, "eta_seconds": 95.0}
    )
    queued = transfer("queued")
    lines = tc.format_list([running, queued])
    assert "100.0 MB/s" in lines[1] and "1m35s" in lines[1]
    assert lines[2].split()[3:5] == ["-", "-"]
