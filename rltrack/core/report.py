"""What happened to the values of a run that did not arrive exactly as written.

Every conversion, rename, route and drop is counted here instead of being
logged line by line. The training process journals its counts (`untold`, as
`counts` control lines, see rltrack.journal); the agent adds them to its own
and writes `report.json` in the run directory (rltrack.delivery.run_end). Backends
add their own section under their name.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Collection

from rltrack.core.atomic_file import write_atomic

#: Refused values (category `refused`, see rltrack.core.refusals) a summary names one by one.
SHOWN_REFUSED = 10
#: Categories that lose nothing: what was delivered as written, converted exactly (a numpy
#: or jax scalar to a float), routed to another kind (an array to a histogram), kept (a
#: step that went back), written again. report.json holds them; stderr says only what was
#: lost, refused or renamed (`summary(leave_out=LOSSLESS)`).
LOSSLESS = ("delivered", "converted", "routed", "kept", "rebuilt")


class Report:
    """Thread-safe counters plus the key renames, grouped by who made them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}
        self._renames: dict[str, dict[str, str]] = {}
        self._changes = 0  # counts and renames made, for `untold`
        self._told: tuple[int, dict[str, Any]] = (0, {"counts": {}, "renamed": {}})  # `_changes` and `as_dict()` at the last `untold`

    def count(self, category: str, reason: str, n: int = 1, *, section: str = "core") -> None:
        with self._lock:
            self._counts.setdefault(f"{section}.{category}", Counter())[reason] += n
            self._changes += 1

    def rename(self, section: str, old: str, new: str) -> None:
        with self._lock:
            self._renames.setdefault(section, {})[old] = new
            self._changes += 1

    def total(self, category: str, *, section: str = "core") -> int:
        with self._lock:
            return sum(self._counts.get(f"{section}.{category}", Counter()).values())

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return self._snapshot()

    def take(self, leave: Collection[str] = ()) -> dict[str, Any]:
        """`as_dict()`, emptying the report: what was counted since the last
        `take`; the sections `leave` stay (a tracker's delivery takes its own, see `take_section`)."""
        with self._lock:
            data = self._snapshot()
            self._counts = {name: counter for name, counter in self._counts.items() if name.partition(".")[0] in leave}
            self._renames = {section: renames for section, renames in self._renames.items() if section in leave}
        data["counts"] = {name: counter for name, counter in data["counts"].items() if name.partition(".")[0] not in leave}
        data["renamed"] = {section: renames for section, renames in data["renamed"].items() if section not in leave}
        return data

    def untold(self) -> dict[str, Any] | None:
        """What was counted and renamed since the last `untold()` (in `as_dict()`
        form), None when nothing was; the report itself keeps everything (the
        training process journals this, and `Logger.report` stays whole). Not
        to be mixed with `take` on one report."""
        with self._lock:
            if self._changes == self._told[0]:
                return None
            now = self._snapshot()
            told = self._told[1]
            self._told = (self._changes, now)
        counts = {}
        for name, counter in now["counts"].items():
            before = told["counts"].get(name, {})
            new = {reason: n - before.get(reason, 0) for reason, n in counter.items() if n != before.get(reason, 0)}
            if new:
                counts[name] = new
        renamed = {}
        for section, renames in now["renamed"].items():
            before = told["renamed"].get(section, {})
            new_renames = {old: new for old, new in renames.items() if before.get(old) != new}
            if new_renames:
                renamed[section] = new_renames
        return {"counts": counts, "renamed": renamed}

    def _snapshot(self) -> dict[str, Any]:
        return {
            "counts": {name: dict(counter) for name, counter in sorted(self._counts.items())},
            "renamed": {section: dict(m) for section, m in sorted(self._renames.items())},
        }

    def add(self, data: dict[str, Any], keep: Callable[[str, str], bool] | None = None) -> None:
        """Adds the counts and renames of another report (`as_dict()`, or a
        saved report.json); `keep(section, category)` (renames: category
        "renamed") leaves out what it is false for."""
        for name, counter in data.get("counts", {}).items():
            section, _, category = name.partition(".")
            if keep is not None and not keep(section, category):
                continue
            for reason, n in counter.items():
                self.count(category, reason, n, section=section)
        for section, renames in data.get("renamed", {}).items():
            if keep is not None and not keep(section, "renamed"):
                continue
            for old, new in renames.items():
                self.rename(section, old, new)

    def take_section(self, section: str) -> dict[str, Any]:
        """The counts and renames of `section`, removed from this report (a
        tracker's delivery saves them with its cursor), in `as_dict()` form."""
        with self._lock:
            prefix = f"{section}."
            counts = {name: dict(self._counts.pop(name)) for name in [n for n in self._counts if n.startswith(prefix)]}
            renamed = {section: self._renames.pop(section)} if section in self._renames else {}
        return {"counts": counts, "renamed": renamed}

    @classmethod
    def load(cls, path: Path) -> Report:
        """A saved report.json (empty if there is none)."""
        report = cls()
        if path.is_file():
            report.add(json.loads(path.read_text()))
        return report

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n")  # read by other processes meanwhile

    def summary(self, leave_out: tuple[str, ...] = ("delivered",)) -> str:
        """A few lines for the console; empty when nothing is counted but the
        categories `leave_out` (what was delivered as written is not a change)."""
        data = self.as_dict()
        lines = []
        for name, counter in data["counts"].items():
            if name.rpartition(".")[2] in leave_out:
                continue
            if name.rpartition(".")[2] == "refused":  # each names its value's place in the journal
                lines.append(f"  {name}: {sum(counter.values())} left out, kept in the journal:")
                lines += [f"    {reason}" for reason in sorted(counter)[:SHOWN_REFUSED]]
                lines += [f"    ... and {len(counter) - SHOWN_REFUSED} more"] if len(counter) > SHOWN_REFUSED else []
                continue
            lines.append(f"  {name}: {sum(counter.values())} ({', '.join(sorted(counter)[:3])}{', ...' if len(counter) > 3 else ''})")
        for section, renames in data["renamed"].items():
            lines.append(f"  {section}.renamed: {len(renames)} keys")
        return "\n".join(lines)
