"""Open a page in headless Chromium and hand back the DOM it built (for report tests).

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``);
tests that need it skip, saying so, where /usr/bin/chromium is missing.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless Chromium not installed: apt-get install -y chromium (Debian)")


def dump_dom(page: Path, timeout_s: float = 90) -> str:
    """The DOM of `page` after Chromium loaded it, serialised."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
             page.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
