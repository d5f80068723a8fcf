"""The peers' command lines (design section 5), without running them."""

from __future__ import annotations

from pathlib import Path

from reservoir.lab.peer_copy import PeerCopy
from reservoir.lab.transfer_peers import (
    GridftpServer,
    XrootdServer,
    gridftp_argv,
    in_netns,
    xrdcp_argv,
)


def test_globus_url_copy_sends_a_local_file_to_the_servers_path_with_n_streams() -> None:
    argv = gridftp_argv(Path("/data/src.img"), "10.0.1.2", 5401, Path("/dst/part-0"), 16)
    assert argv == [
        "globus-url-copy", "-p", "16", "-bs", "4194304", "-fast",
        "file:///data/src.img", "ftp://10.0.1.2:5401/dst/part-0",
    ]  # fmt: skip


def test_xrdcp_takes_at_most_15_streams_and_an_absolute_destination() -> None:
    argv = xrdcp_argv(Path("/data/src.img"), "10.0.1.2", 5501, Path("/dst/part-0"), 32)
    assert argv == [
        "xrdcp", "-N", "-f", "--streams", "15",
        "/data/src.img", "root://10.0.1.2:5501//dst/part-0",
    ]  # fmt: skip
    assert xrdcp_argv(Path("/s"), "h", 1, Path("/d"), 8)[4] == "8"


def test_only_xrdcp_clamps_its_streams() -> None:
    assert XrootdServer(Path("/d")).client_streams(64) == 15
    assert GridftpServer(Path("/d")).client_streams(64) == 64


def test_gridftp_server_is_anonymous_as_nobody_on_one_address_and_one_directory(
    tmp_path: Path,
) -> None:
    server = GridftpServer(Path("/dst"), "10.0.1.2", 5401, state=tmp_path)
    argv = server.argv()
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert "-aa" in argv and argv[argv.index("-anonymous-user") + 1] == "nobody"
    assert argv[argv.index("-p") + 1] == "5401"
    assert argv[argv.index("-control-interface") + 1] == "10.0.1.2"
    assert argv[argv.index("-data-interface") + 1] == "10.0.1.2"
    assert argv[argv.index("-restrict-paths") + 1] == "/dst"
    assert flags["-c"] == str(tmp_path / "gridftp.conf")  # not /etc/gridftp.conf


def test_xrootd_exports_the_directory_and_keeps_its_files_in_its_state(tmp_path: Path) -> None:
    server = XrootdServer(Path("/dst"), "10.0.1.2", 5501, state=tmp_path, allow="10.0.1.1")
    argv = server.argv()
    assert argv[:3] == ["xrootd", "-R", "nobody"]
    assert argv[argv.index("-s") + 1].startswith(str(tmp_path))  # its manifest too
    config = (tmp_path / "xrootd.cfg").read_text().splitlines()
    assert "all.export /dst" in config and "xrd.port 5501" in config
    assert f"all.adminpath {tmp_path}" in config and "xrd.allow host 10.0.1.1" in config
    XrootdServer(Path("/dst"), state=tmp_path).argv()
    assert "xrd.allow host 127.0.0.1" in (tmp_path / "xrootd.cfg").read_text().splitlines()


def test_commands_run_in_a_namespace_through_ip_netns_exec() -> None:
    assert in_netns("rsv1-dst", ["xrootd"]) == ["ip", "netns", "exec", "rsv1-dst", "xrootd"]
    assert in_netns(None, ["xrootd"]) == ["xrootd"]


def test_copy_figures_count_the_client_and_the_server() -> None:
    copy = PeerCopy("gridftp", 0.0, 2.0, 1_000_000_000, 0.3, 0.2, True, 8, 8)
    assert copy.goodput_bps == 4e9 and copy.cpu_s_per_gb == 0.5 and copy.note is None


def test_gridftp_in_a_namespace_gets_a_hosts_file_naming_its_address(tmp_path: Path) -> None:
    server = GridftpServer(Path("/dst"), "10.0.1.2", 5401, netns="rsv1-dst", state=tmp_path)
    argv = server.launch_argv()
    assert argv[:7] == ["ip", "netns", "exec", "rsv1-dst", "sh", "-c", argv[6]]
    assert "mount --bind" in argv[6] and argv[7] == str(tmp_path / "hosts")
    assert argv[8:] == server.argv()
    assert "10.0.1.2 gridftp-10-0-1-2" in (tmp_path / "hosts").read_text().splitlines()
    assert GridftpServer(Path("/dst"), state=tmp_path).launch_argv()[0] == "globus-gridftp-server"
