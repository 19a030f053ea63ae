"""The platforms rltrack says it runs on, and what it says elsewhere.

rltrack needs POSIX (flock, process groups): on a system without `fcntl`
`make_logger` must say so in one sentence, not fail with a
ModuleNotFoundError from deep in an import chain. macOS has no /proc: the
checks that read it must fall back to what every POSIX system has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rltrack.core import posix
from rltrack.agent.files import process_alive, process_start
from rltrack.trackers.wandb.files import being_written
from waiting import wait_until

WITHOUT_FCNTL = """
import sys
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` fails
import rltrack
try:
    rltrack.make_logger({"backends": {"use": ["local"]}, "run": {"root": sys.argv[1]}})
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
"""


def test_make_logger_without_fcntl_says_which_systems_are_supported(tmp_path):
    done = subprocess.run([sys.executable, "-c", WITHOUT_FCNTL, str(tmp_path)], capture_output=True, text=True, timeout=120)
    kind, message = done.stdout.strip().split("\n", 1)
    assert kind == "UnsupportedPlatformError", done.stdout + done.stderr
    assert "Linux and macOS" in message and "fcntl" in message
    assert "\n" not in message and message.count(". ") == 0  # one sentence
    assert "ModuleNotFoundError" not in done.stderr
    assert not any(tmp_path.iterdir())  # nothing half made


def test_a_live_process_is_recognised_without_proc(tmp_path, monkeypatch):
    """With /proc a pid whose start time differs is another process (a reused
    pid); without it (macOS) the start time is unknown, and a live pid counts."""
    start = process_start(os.getpid())
    assert start is not None and not process_alive(os.getpid(), start + 1)
    monkeypatch.setattr(posix, "PROC", tmp_path / "no-proc")
    assert process_start(os.getpid()) is None
    assert process_alive(os.getpid(), start + 1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    assert not process_alive(child.pid, None)


def test_a_file_being_written_is_seen_without_proc(tmp_path, monkeypatch):
    """With /proc a file held open by another process is being written; without
    it, a file changed in the last `QUIET` seconds is."""
    path = tmp_path / "run.wandb"
    path.write_bytes(b"x")
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(path)!r}, 'ab'); import time; time.sleep(60)"])
    try:
        old = time.time() - 3600
        os.utime(path, (old, old))
        wait_until(lambda: being_written([path]), 60, "/proc to show the holder has the file open")
        monkeypatch.setattr(posix, "PROC", tmp_path / "no-proc")
        assert not being_written([path])  # unchanged for an hour: done
        os.utime(path, None)
        assert being_written([path])  # changed just now
    finally:
        holder.kill()
        holder.wait(timeout=60)
