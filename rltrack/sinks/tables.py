"""Readable tables of the latest values, as SB3, SpinningUp and DI-engine print them.

`LatestValues` collects, per namespace, the newest value of each key since the
last table; a table is due at `dump()`, at close, and whenever a key that is
already pending arrives again or the step moves on (so loops that never call
`dump` still get one table per step, and a table never mixes two steps). Both
the console and the local text logs (and progress.csv rows) use it.

For tables read by people, `min_seconds` caps that to one table per namespace
per interval when `dump` is never called: later values replace pending ones
(the journal, progress.csv and TensorBoard still get every record). Formatting
a table per record was a third of the pipeline thread's time in a tight loop.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

#: At most one table per namespace per this many seconds when `dump` is never called.
TABLE_SECONDS = 1.0


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):  # a block's each_reward
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def format_table(title: str, values: dict[str, Any]) -> str:
    """A two-column box: `title` on top, then one `key | value` line per key."""
    rows = [(key, format_value(value)) for key, value in values.items()]
    left = max([len(title)] + [len(k) for k, _ in rows])
    right = max([5] + [len(v) for _, v in rows])
    rule = f"+-{'-' * left}-+-{'-' * right}-+"
    lines = [rule, f"| {title:<{left}} | {'Value':<{right}} |", rule]
    lines += [f"| {k:<{left}} | {v:<{right}} |" for k, v in rows]
    lines.append(rule)
    return "\n".join(lines)


#: Keys per grid in `format_grids`, as DI-engine's `get_tabulate_vars_hor`.
GRID_KEYS = 4
#: Below this magnitude DI-engine's `{:.6f}` keeps fewer than 3 significant
#: digits (3e-7 prints as 0.000000): such numbers keep 6 significant digits instead.
SMALL = 1e-4


def grid_value(value: Any) -> str:
    """A cell of DI-engine's grids: numbers as `{:.6f}` (integers too: `5.000000`),
    except non-zero magnitudes below `SMALL`, which `{:.6g}` keeps readable;
    lists as Python prints them (`[11.0, 10.0]`), text as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != 0 and abs(value) < SMALL:
            return f"{value:.6g}"
        try:
            return f"{value:.6f}"
        except OverflowError:  # an int beyond a float's range: its digits, as Python prints it
            return str(value)
    return str(value)


def format_grids(values: dict[str, Any]) -> str:
    """DI-engine's horizontal tables as its `get_tabulate_vars_hor` prints them:
    a `Name` row of keys over a `Value` row, `GRID_KEYS` keys per grid, grids
    one under the other, each line ending with a newline, and one more empty
    line when the keys fill the last grid exactly (DI-engine's loop then
    prints an empty last grid)."""
    items = [(key, grid_value(value)) for key, value in values.items()]
    grids = []
    for start in range(0, len(items), GRID_KEYS):
        columns = [("Name", "Value"), *items[start : start + GRID_KEYS]]
        widths = [max(len(name), len(value)) for name, value in columns]
        rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        names = "|" + "|".join(f" {name:<{w}} " for (name, _), w in zip(columns, widths)) + "|"
        cells = "|" + "|".join(f" {value:<{w}} " for (_, value), w in zip(columns, widths)) + "|"
        grids.append("\n".join([rule, names, rule, cells, rule]) + "\n")
    if items and len(items) % GRID_KEYS == 0:
        grids.append("\n")
    return "".join(grids)


def format_lines(values: dict[str, Any]) -> str:
    """DI-engine's collector text: one `key: value` line per key, values as
    Python prints them (`12.5`, `[9.0, 16.0]`), full precision."""
    return "".join(f"{key}: {value}\n" for key, value in values.items())


class Pending:
    """The latest values and steps of one namespace since its last table."""

    __slots__ = ("values", "steps", "time", "opened")

    def __init__(self, opened: float) -> None:
        self.values: dict[str, Any] = {}
        self.steps: dict[str, int] = {}
        self.time = opened
        self.opened = opened

    def other_step(self, steps: dict[str, int]) -> bool:
        """True if `steps` puts a different value on an axis this table already has."""
        mine = self.steps
        for axis, value in steps.items():  # a loop, not any(<generator>): this runs for every record
            if mine.get(axis, value) != value:
                return True
        return False

    def heading(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.time))
        steps = " ".join(f"{axis}={value}" for axis, value in self.steps.items())
        return f"[{stamp}] {steps}".rstrip()


class LatestValues:
    """Collects records; `add` returns the namespaces whose table fell due first."""

    def __init__(self, min_seconds: float = 0.0) -> None:
        self.pending: dict[str, Pending] = {}
        self.min_seconds = min_seconds

    def add(self, namespace: str, when: float, steps: dict[str, int], data: dict[str, Any]) -> Sequence[tuple[str, Pending]]:
        """A record's values (`data`) at time `when` and `steps` (an `Event`'s
        fields, passed apart so that callers need not build an `Event`)."""
        due: Sequence[tuple[str, Pending]] = ()  # most records: no table due, no list built
        current = self.pending.get(namespace)
        if current is not None:
            new_step = current.other_step(steps)
            if new_step or not current.values.keys().isdisjoint(data):
                if when - current.opened >= self.min_seconds:
                    due = [(namespace, current)]
                    current = None
                elif new_step:  # throttled: the newer step replaces the older one instead of mixing with it
                    current.values.clear()
                    current.steps.clear()
        if current is None:
            current = self.pending[namespace] = Pending(when)
        current.values.update(data)
        current.steps.update(steps)
        current.time = when
        return due

    def mark(self) -> dict[str, tuple[dict[str, Any], dict[str, int], float, float]]:
        """A copy of what is pending (see `undo`)."""
        return {ns: (dict(p.values), dict(p.steps), p.time, p.opened) for ns, p in self.pending.items()}

    def undo(self, mark: dict[str, tuple[dict[str, Any], dict[str, int], float, float]]) -> None:
        """What was pending at `mark` (a write that failed half-way)."""
        self.pending = {}
        for namespace, (values, steps, when, opened) in mark.items():
            pending = self.pending[namespace] = Pending(opened)
            pending.values, pending.steps, pending.time = values, steps, when

    def take_all(self) -> list[tuple[str, Pending]]:
        due = [(ns, p) for ns, p in self.pending.items() if p.values]
        self.pending = {}
        return due
