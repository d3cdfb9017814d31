"""Debian's chromium for the browser tests (Playwright drives it; Playwright's own browser download is not used).

    with chromium() as browser: page = browser.new_page()   # Debian's chromium, installed first if missing (root)

.ci/run installs chromium too; this installs it when a test session runs on a fresh machine as root.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def ensure_chromium() -> str:
    """The path of Debian's chromium, after `apt-get install -y chromium` when it is missing and we are root."""
    if not CHROMIUM.exists() and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(["apt-get", "install", "-y", "chromium"], env=env, capture_output=True).returncode:
            subprocess.run(["apt-get", "update"], env=env, check=True, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "chromium"], env=env, check=True, capture_output=True)
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    return str(CHROMIUM)


@contextmanager
def chromium() -> Iterator:
    """A headless Debian chromium driven by Playwright's sync API (one per test session is enough: give each test
    its own context with `browser.new_context()`); closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=ensure_chromium(), headless=True)
        try:
            yield browser
        finally:
            browser.close()
