"""Headless Debian Chromium driven by Selenium (chromedriver from Debian's chromium-driver).

`scripts/setup_browser.sh` installs both. A missing browser fails the tests that need one,
unless OPENTINKER_SKIP_BROWSER=1 says this machine has none on purpose.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SKIP_ENV = "OPENTINKER_SKIP_BROWSER"
ARTIFACTS_ENV = "OPENTINKER_TEST_ARTIFACTS"
REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,1000")
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
DRIVER_CANDIDATES = ("chromedriver",)


def artifacts_dir() -> Path:
    """$OPENTINKER_TEST_ARTIFACTS/dashboard, default <repo>/test-artifacts/dashboard."""
    root = Path(os.environ.get(ARTIFACTS_ENV) or REPO_ROOT / "test-artifacts")
    path = root / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_executable(candidates: tuple[str, ...]) -> str | None:
    return next((found for name in candidates if (found := shutil.which(name))), None)


def require_browser() -> tuple[str, str]:
    """(chromium, chromedriver) paths; skip only when OPENTINKER_SKIP_BROWSER=1, else fail."""
    chromium, driver = find_executable(CHROMIUM_CANDIDATES), find_executable(DRIVER_CANDIDATES)
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", driver)) if path is None]
    if importlib.util.find_spec("selenium") is None:
        missing.append("the selenium Python package")
    if missing:
        message = f"the browser test needs {', '.join(missing)}: run scripts/setup_browser.sh"
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{message} ({SKIP_ENV}=1)")
        pytest.fail(f"{message} (or set {SKIP_ENV}=1 on a machine without a browser)")
    return chromium, driver


@contextmanager
def headless_chromium() -> Iterator[object]:
    """A Selenium WebDriver on a fresh profile, quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()


def script_errors(driver) -> list[str]:  # noqa: ANN001 - a Selenium WebDriver
    """SEVERE console entries other than failed HTTP responses (which the page handles)."""
    return [entry["message"] for entry in driver.get_log("browser")
            if "Failed to load resource" not in entry["message"]]
