"""What every benchmark prints and appends to `bench/RESULTS.md`.

Why this exists: a figure is worth only as much as its context on a shared
2-core machine, so every script ends the same way: a section headed with the
date, the machine (cores, RAM), the load average at start and end (a run whose
1-minute load exceeded half the cores is marked as measured under load), the
package versions, the rltrack commit and the exact command, then the script's
tables and verdicts. `Section.finish` prints it and puts it into RESULTS.md,
which holds the latest run of each command (issue 38): the section of the
same command is replaced, a new command's section goes at the end; earlier
runs stay in git.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"

#: Distributions whose versions are named when the script imported them.
PACKAGES = {"torch": "torch", "stable_baselines3": "stable-baselines3", "gymnasium": "gymnasium", "ray": "ray",
            "acme": "dm-acme", "mlflow": "mlflow", "wandb": "wandb", "neptune": "neptune",
            "tensorboardX": "tensorboardX", "tensorboard": "tensorboard", "numpy": "numpy"}  # fmt: skip


def load_average() -> tuple[float, float, float]:
    return os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3


def ram_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "rltrack"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in rltrack/" if dirty else "")


def versions() -> str:
    """Versions of the optional packages this process imported (so the reader
    knows which ones the figures involve)."""
    found = []
    for module, dist in PACKAGES.items():
        if module in sys.modules:
            try:
                found.append(f"{dist} {importlib.metadata.version(dist)}")
            except importlib.metadata.PackageNotFoundError:
                continue
    return ", ".join(found) or "none"


def fmt_load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


class Section:
    """Started when the measurement starts; `finish` prints and appends."""

    def __init__(self) -> None:
        self.load_at_start = load_average()
        self.started = time.perf_counter()
        self.command = shlex.join(["python", os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]])

    def header(self, title: str) -> str:
        load_at_end = load_average()
        cores = os.cpu_count() or 1
        loaded = max(self.load_at_start[0], load_at_end[0]) > cores / 2
        return "\n".join([
            f"## {title} ({datetime.date.today().isoformat()})",
            "",
            f"Command: `{self.command}` (from the repository root; took {time.perf_counter() - self.started:.0f} s)  ",
            f"Machine: {cores} cores ({platform.machine()}), {ram_gib()} RAM; load average {fmt_load(self.load_at_start)} "
            f"at start, {fmt_load(load_at_end)} at end{' — **measured under load**' if loaded else ''}  ",
            f"Software: Python {platform.python_version()} on {platform.system()}; rltrack at {commit()}; {versions()}",
        ])  # fmt: skip

    def finish(self, title: str, body: str, write: bool = True) -> str:
        text = f"{self.header(title)}\n\n{body.strip()}\n"
        print(text)
        if write:
            RESULTS.write_text(with_section(RESULTS.read_text(encoding="utf-8"), text, self.command), encoding="utf-8")
            print(f"(written to {RESULTS.relative_to(REPO)})")
        return text


def with_section(results: str, text: str, command: str) -> str:
    """`results` with `text` in place of the section (`## ...` up to the next)
    that ran `command`, or at the end when none did."""
    parts = results.split("\n## ")
    marker = f"Command: `{command}`"
    for index, part in enumerate(parts[1:], start=1):
        if marker in part:
            parts[index] = text.removeprefix("## ").rstrip("\n") + "\n"
            return "\n## ".join(parts)
    return results.rstrip("\n") + "\n\n" + text


def arguments(doc: str, quick: str) -> argparse.ArgumentParser:
    """The options every benchmark has: `--quick` (CI-sized; `quick` says what
    it changes) and `--no-write` (print only); the script adds its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"CI-sized run: {quick}")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/RESULTS.md")
    return parser


def verdict(name: str, value: str, target: str, met: bool) -> str:
    """One line of a target summary: `- name: value (target ...) **met**`."""
    return f"- {name}: {value} (target {target}) **{'met' if met else 'MISSED'}**"
