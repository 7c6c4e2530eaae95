"""Take the docs' screenshots of the viewer (``statekeep serve``) in a real headless Chromium.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Builds a demo FileStore in a temporary folder (a finished run with tool calls, its subagent,
a run whose refund call has an unknown outcome, a fork, a run stopped by its limit), serves it
with ``statekeep serve`` in a process of its own, and writes ``runs.png`` (the runs page) and
``run.png`` (the refund run's page: its waterfall and token chart, its timeline, the call in
doubt marked), 1280 pixels wide. Needs Debian's ``chromium`` and
``chromium-driver`` (``./dev test`` installs them as root) and selenium (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.web_serving import serving  # noqa: E402  (statekeep serve in a process of its own)

from statekeep import FileStore, State, agent_info  # noqa: E402

WIDTH, HEIGHT, MAX_HEIGHT = 1280, 900, 2400
DEADLINE = 60.0  # seconds: for a page to show

TRAVEL = agent_info(
    "travel-agent", "claude-sonnet", system="You plan trips.", tools=["search_flights", "spawn_subagent"]
)
SUPPORT = agent_info(
    "support-agent", "gpt-large", system="You help customers.", tools=["lookup_order", "refund"]
)
RESEARCH = agent_info("research-agent", "claude-sonnet", system="You read papers.", tools=["search_papers"])


class Clock:
    """Entry times for the pictures: a run that took minutes, saved hours ago (a State stamps
    its entries with the time they are added; here that is this clock's)."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def step(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)

    def __call__(self) -> str:
        self.step(0.4)
        return self.at.isoformat()


def build_demo(path: Path) -> FileStore:
    """The demo store the screenshots show."""
    store = FileStore(path)
    now = datetime.now(UTC)
    clock = Clock(now - timedelta(hours=3, minutes=12))
    with mock.patch("statekeep._run.state.now", clock):
        trip = State("Find the cheapest flight from Berlin to Lisbon on 14 May", id="trip-lisbon")
        trip.labels["team"] = "travel"
        trip.begin_run(TRAVEL)
        trip.add_user("Direct flights only, and check the baggage rules.")
        trip.request("claude-sonnet")
        clock.step(2.1)
        search = {"from": "BER", "to": "LIS", "date": "2026-05-14", "direct": True}
        spawn = {"task": "Check the cabin baggage rules of TAP and easyJet"}
        trip.add_reply(
            "I'll search for direct flights and have a subagent check the baggage rules.",
            [
                {"id": "call_1", "name": "search_flights", "args": search},
                {"id": "call_2", "name": "spawn_subagent", "args": spawn},
            ],
            usage={"input_tokens": 1840, "output_tokens": 96},
        )
        clock.step(1.3)
        flights = [
            {"carrier": "TAP", "flight": "TP 537", "departs": "06:10", "price_eur": 89},
            {"carrier": "easyJet", "flight": "U2 5311", "departs": "13:45", "price_eur": 74},
        ]
        trip.add_tool_result("call_1", flights)
        child = trip.child(spawn["task"], id="trip-lisbon-baggage", call_id="call_2")
        child.begin_run(RESEARCH)
        child.request("claude-sonnet")
        clock.step(3.2)
        child.add_reply("easyJet: one under-seat bag free; TAP: 8 kg cabin bag included.")
        child.finish("easyJet: under-seat bag only; TAP: 8 kg cabin bag.")
        store.save(child)
        trip.add_tool_result("call_2", child.answer)
        trip.request("claude-sonnet")
        clock.step(2.7)
        answer = "easyJet U2 5311 at 13:45 for 74 EUR (under-seat bag only); TAP TP 537 at 06:10 for 89 EUR includes 8 kg."
        trip.add_reply(answer, usage={"input_tokens": 2310, "output_tokens": 142})
        trip.set_data("shortlist", ["U2 5311", "TP 537"])
        trip.finish(answer)
        store.save(trip)

        clock.at = now - timedelta(minutes=47)
        refund = State("Refund order #4821 (arrived damaged)", id="refund-4821", labels={"team": "support"})
        refund.begin_run(SUPPORT)
        refund.request("gpt-large")
        clock.step(1.8)
        refund.add_reply(
            "",
            [{"id": "call_7", "name": "lookup_order", "args": {"order": 4821}}],
            usage={"input_tokens": 1320, "output_tokens": 41},
        )
        clock.step(0.8)
        refund.add_tool_result("call_7", {"order": 4821, "total_eur": 129.0, "status": "delivered"})
        refund.request("gpt-large")
        clock.step(1.5)
        refund.add_reply(
            "",
            [{"id": "call_8", "name": "refund", "args": {"order": 4821, "amount_eur": 129.0}}],
            usage={"input_tokens": 1610, "output_tokens": 58},
        )
        clock.step(30)
        # The worker was killed during the refund call: nobody knows whether it went through.
        refund.add_tool_result("call_8", None, outcome="unknown")
        store.save(refund)

        clock.at = now - timedelta(minutes=21)
        papers = State("Summarise this week's papers on agent memory", id="papers-week-48")
        papers.begin_run(RESEARCH)
        for turn in range(3):
            papers.request("claude-sonnet")
            clock.step(4)
            call = {
                "id": f"call_p{turn}",
                "name": "search_papers",
                "args": {"query": "agent memory", "page": turn},
            }
            papers.add_reply("", [call], usage={"input_tokens": 900 + 300 * turn, "output_tokens": 40})
            papers.add_tool_result(call["id"], [f"2611.{1040 + turn}", f"2611.{2210 + turn}"])
        papers.stop("limit")
        store.save(papers)
    # A retry of the trip from before its last reply (the fork keeps the source's times).
    store.fork("trip-lisbon", at_seq=8, new_id="trip-lisbon-retry", labels={"team": "travel", "try": "2"})
    return store


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's headless Chromium through its chromedriver, given by path (nothing downloaded)."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        raise SystemExit(
            "chromium and chromedriver not found; install them: apt-get install chromium chromium-driver"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise SystemExit(
            "selenium is not installed; install the test extra: pip install -e '.[test]'"
        ) from None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def shoot(browser: Any, url: str, ready: str, out: Path) -> None:
    """Open ``url``, wait for ``ready`` (a CSS selector), and save the page, 1280 wide and as
    tall as its content (at least 900, at most 2400 pixels)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    browser.get(url)
    WebDriverWait(browser, DEADLINE).until(lambda d: d.find_elements(By.CSS_SELECTOR, ready))
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": WIDTH,
            "height": max(HEIGHT, min(int(height), MAX_HEIGHT)),
            "deviceScaleFactor": 1,
            "mobile": False,
        },
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    if not browser.save_screenshot(str(out)):
        raise SystemExit(f"could not write {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Take the viewer's screenshots for the docs.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="folder for the PNGs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="statekeep-screenshots-") as folder:
        store = build_demo(Path(folder) / "store")
        store.close()
        with serving("--store", str(Path(folder) / "store")) as url, chromium() as browser:
            shoot(browser, url, "#runs tbody tr.run", args.out / "runs.png")
            # The run whose refund call has an unknown outcome: what the viewer makes stand out.
            shoot(browser, url + "runs/refund-4821", "#timeline li.entry.unknown", args.out / "run.png")
    for name in ("runs.png", "run.png"):
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
