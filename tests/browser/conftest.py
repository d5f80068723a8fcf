"""Fixtures of the dashboard's browser tests: the lab of ``reservoir.lab.dashboard_shots``
(a real coordinator and four real agents on the emulated 2 x 500 Mbit/s, 100 ms LFN),
Debian's Chromium run inside the lab's namespace, a page per test.

Everything is started once per module and stopped by PID at its end; the lab's
namespaces are deleted also on failure. Screenshots go to the test's ``tmp_path`` and
to /tmp/reservoir-screens/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from reservoir.lab.dashboard_shots import (
    LAUNCH_ARGS,
    SCREENS,
    DashboardLab,
    chromium_in,
    dashboard_lab,
    missing,
    running,
)

Shot = Callable[[Page, str], Path]
ENDED = ("completed", "cancelled")  # a failed transfer still holds its destination
MiB = 1 << 20
SIZE = 2048 * MiB  # 2 members of 1 GiB


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashboardLab]:
    why = missing()
    if why:
        pytest.skip(f"no browser tests: {why}")
    with dashboard_lab(tmp_path_factory.mktemp("dashboard-lab"), SIZE) as d:
        yield d


@pytest.fixture(scope="module")
def browser(lab: DashboardLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    wrapper = chromium_in(lab.ns, tmp_path_factory.mktemp("chromium"))
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(wrapper), headless=True, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (its own sessionStorage): nobody is signed in."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = context.new_page()
    yield p
    context.close()


@pytest.fixture
def signed_in(page: Page, lab: DashboardLab) -> Page:
    """The page signed in with the coordinator's user token, on the transfer list."""
    page.goto(f"{lab.base}/")
    page.fill("#token", lab.token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("header.top")
    return page


class LiveTransfers:
    """Transfers of 2 legs x 8 streams (16 streams), each NIC paced by its agent to
    15% of its share: the current one while it is running with most of its bytes still
    to copy, else a new one (whatever the machine's load, a test looks at a transfer
    that keeps running while it looks)."""

    def __init__(self, lab: DashboardLab) -> None:
        self.lab = lab
        self.started: list[str] = []

    def get(self) -> str:
        if self.started:
            t = self.lab.transfer(self.started[-1])
            if t["state"] == "running" and t["done_bytes"] < 0.6 * t["total_bytes"]:
                return self.started[-1]
        self.cancel()  # a destination belongs to one transfer at a time
        tid = self.lab.start(8, pacing={"policy": "per-nic", "margin": 0.85})
        self.started.append(tid)
        self.lab.wait(tid, running, timeout=60)
        return tid

    def cancel(self) -> None:
        """Cancels the transfers still going and waits until each has ended (its
        destinations released by the agents)."""
        for tid in self.started:
            if self.lab.transfer(tid)["state"] not in ENDED:
                self.lab.call("POST", f"/transfers/{tid}/cancel")
                self.lab.wait(tid, lambda t: t["state"] in ENDED, timeout=60)


@pytest.fixture(scope="module")
def live_transfers(lab: DashboardLab) -> Iterator[LiveTransfers]:
    live = LiveTransfers(lab)
    yield live
    live.cancel()


@pytest.fixture
def live_transfer(live_transfers: LiveTransfers) -> str:
    """The id of a transfer copying bytes (16 streams) when the test starts."""
    return live_transfers.get()


@pytest.fixture
def screenshot(tmp_path: Path) -> Shot:
    """``screenshot(page, name)``: a full-page PNG in tmp_path and /tmp/reservoir-screens/."""
    SCREENS.mkdir(parents=True, exist_ok=True)

    def take(p: Page, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        p.screenshot(path=str(path), full_page=True)
        (SCREENS / f"test-{name}.png").write_bytes(path.read_bytes())
        return path

    return take
