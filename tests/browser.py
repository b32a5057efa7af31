"""Headless Chromium for the tests that open the project's HTML (Data Docs, nightly report).

Debian's ``/usr/bin/chromium`` (``make browser`` installs it) driven by Playwright's Python
package; Playwright never downloads a browser of its own here. The flags keep Chromium off
the network: this machine has none, and Chromium's background connections would only fail.

Use the ``browser_page`` fixture (tests/conftest.py): ``page.goto(path.as_uri())``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = Path(os.environ.get("RMQ_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextmanager
def chromium_page(user_data_dir: Path) -> Iterator[object]:
    """A fresh page in a fresh headless Chromium profile; closed on exit."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        raise RuntimeError(f"{CHROMIUM} is missing: run `make browser` (apt-get install "
                           "chromium, as root)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS)
        try:
            page = context.new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            context.close()
