"""Debian's chromium for the browser tests (Playwright drives it; Playwright's own browser download is not used).

    with chromium() as browser: page = browser.new_page()   # Debian's chromium

tests/setup.sh installs it (Debian's `chromium` package); a test never installs anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def ensure_chromium() -> str:
    """The path of Debian's chromium; a clear error when it is missing."""
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run tests/setup.sh (or install Debian's chromium package)")
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
