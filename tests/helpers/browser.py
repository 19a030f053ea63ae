"""Debian's headless Chromium on a page, for the tests of rltrack's HTML pages (tests/runs).

`chromium` runs it with console messages logged to stderr (`INFO:CONSOLE...` lines,
uncaught script errors among them), plus any options (`--screenshot=FILE`,
`--dump-dom` with `--virtual-time-budget=MS`); `console_lines` picks those lines.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: The browser window's size in pixels (a screenshot's size).
WINDOW = (1200, 3000)


def chromium(tmp_path: Path, page: Path, *options: str, window: tuple[int, int] = WINDOW) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on `page` with console messages logged to stderr (`INFO:CONSOLE...` lines)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("the report test needs Debian's chromium: apt-get install -y chromium (`make test` installs it)")
    command = [
        executable, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={window[0]},{window[1]}", *options, page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]
