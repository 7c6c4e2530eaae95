"""A real headless Chromium for the viewer's tests, and ``statekeep serve`` in a process of its own.

The browser is Debian's ``chromium`` driven through Debian's ``chromedriver`` (packages
``chromium`` and ``chromium-driver``; ``./dev test`` installs them when running as root).
Selenium is given the driver's path, so it never runs Selenium Manager (which would try to
download a driver). Missing, the browser tests skip saying what to install; under CI
(``CI=true``) they fail instead, so that a CI machine without the browser cannot pass.

One browser serves the whole session (starting Chromium is the slow part); the ``page``
fixture hands it to a test with no cookies and a blank page.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.web_serving import start_serve, url_of

STOP_DEADLINE = 20.0
WAIT = 20.0  # seconds a test waits for something to show in the page


def need_browser(reason: str) -> None:
    """Skip the test for a missing browser, or fail it under CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI needs the browser: {reason}", pytrace=False)
    pytest.skip(reason)


def browser_binaries() -> tuple[str, str]:
    """The paths of chromium and chromedriver, once selenium imports; else skip (fail under CI)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        need_browser(
            "chromium and chromedriver not found; install them with: "
            "apt-get install chromium chromium-driver (./dev test does, as root)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        need_browser("selenium is not installed; pip install -e '.[test]'")
    assert chromium is not None and driver is not None
    return chromium, driver


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium (selenium WebDriver), 1280x900, for the whole session."""
    chromium, driver = browser_binaries()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    # The driver by path: Selenium Manager never runs, so nothing is downloaded.
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    chrome.set_page_load_timeout(WAIT * 3)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """The session's browser, with no cookies from earlier tests and a blank page after."""
    browser.delete_all_cookies()
    yield browser
    browser.get("about:blank")
    browser.delete_all_cookies()


def wait_for(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = WAIT) -> Any:
    """What ``condition(driver)`` returns once truthy (polled by selenium), or fail naming ``what``.
    An element the page replaced while the condition read it (the live page swaps rows) is
    polled again, as an element not there yet is."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
            condition
        )
    except TimeoutException:
        pytest.fail(f"the page did not show {what} within {timeout:.0f} s (at {driver.current_url})")


@dataclass
class Server:
    """A running ``statekeep serve`` process and the URL it printed (ends with ``/``)."""

    proc: subprocess.Popen[bytes]
    url: str

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited in time; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
        return self.proc.returncode


def start_server(store_url: str, *args: str, env: dict[str, str] | None = None) -> Server:
    """Start ``statekeep serve --store STORE_URL --port 0 ARGS`` and wait for its serving line."""
    proc = start_serve("--store", store_url, "--port", "0", *args, env=env)
    return Server(proc, url_of(proc))


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """``serve(store_url, *args)``: a ``statekeep serve`` process, stopped after the test."""
    started: list[Server] = []

    def start(store_url: str, *args: str, env: dict[str, str] | None = None) -> Server:
        server = start_server(store_url, *args, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
