"""Reads the collector/evaluator/learner/buffer text logs back into numbers, as
a DI-engine user's script would: each table block (a `[time] axis=value ...`
heading, then DI-engine's horizontal `Name`/`Value` grids) becomes a `Block`;
`[INFO]` lines are kept as text. Written independently of
rltrack.backends.tables, so a formatting bug shows up as a mismatch."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADING = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]((?: \w+=-?\d+)*)$")
_INFO = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]\[INFO\] (.*)$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-?(inf|nan)$")


@dataclass
class Block:
    steps: dict[str, int]
    values: dict[str, Any] = field(default_factory=dict)


def parse_value(text: str) -> Any:
    """int, float, list of numbers, or the text itself (a checkpoint name)."""
    if text.startswith("[") and text.endswith("]"):
        return [parse_value(part.strip()) for part in text[1:-1].split(",") if part.strip()]
    if _NUMBER.match(text):
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    return text


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_blocks(path: Path) -> list[Block]:
    """Every table block of a text log, in order."""
    blocks: list[Block] = []
    names: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.match(line)
        if heading:
            steps = dict(pair.split("=") for pair in heading.group(2).split())
            blocks.append(Block({axis: int(value) for axis, value in steps.items()}))
        elif line.startswith("| Name "):
            names = _cells(line)[1:]
        elif line.startswith("| Value ") and names is not None:
            blocks[-1].values.update(zip(names, (parse_value(cell) for cell in _cells(line)[1:])))
            names = None
    return blocks


def read_info_lines(path: Path) -> list[str]:
    """The messages of the `[time][INFO] message` lines."""
    return [m.group(1) for m in map(_INFO.match, path.read_text(encoding="utf-8").splitlines()) if m]


def read_tfevents(logdir: Path) -> dict[str, dict[int, list[float]]]:
    """tag -> {step: [values written at that step, in order]} of every scalar
    under `logdir`, read with TensorBoard's EventAccumulator. A step can hold
    several values: SB3's EvalCallback dumps pending `train/*` values at the
    last known `train_iter`, which the next table also carries."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, dict[int, list[float]]] = {}
    for file in sorted(logdir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(file), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            for event in accumulator.Scalars(tag):
                scalars.setdefault(tag, {}).setdefault(event.step, []).append(event.value)
    return scalars


def holds(points: dict[int, list[float]], step: int, value: float, rel: float = 1e-5) -> bool:
    """True if one of the values written at `step` equals `value` to `rel` (the text's 6 digits)."""
    return any(abs(v - value) <= rel * abs(value) + 1e-9 for v in points.get(step, []))
