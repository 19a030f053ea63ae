"""Reads the collector/evaluator/learner/buffer text logs back into numbers, as
a DI-engine user's script would: every record line starts with DI-engine's
logging prefix `[time][where][INFO] message` (rltrack puts the record's
`axis=value` steps where DI-engine names its source line); a block is the
collector's `collect end:` followed by `key: value` lines, or a prefix line
followed by DI-engine's horizontal `Name`/`Value` grids. Other messages
(`[EVALUATOR]env 0 finish episode, ...`) are kept as text. Written
independently of rltrack.sinks.tables, so a formatting bug shows up as a
mismatch; it reads DI-engine's own files too (their `where` is `file.py:line`,
so their blocks have no steps)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\[([^\]]*)\]\[INFO\] (.*)$")
_STEPS = re.compile(r"^(\w+=-?\d+)( \w+=-?\d+)*$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-?(inf|nan)$")
_LINE = re.compile(r"^(\w[^:]*): (.*)$")  # a key as its library wrote it: `rollout/ep_rew_mean: 21.5`


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


def _steps(where: str) -> dict[str, int]:
    """rltrack's `env_steps=1 train_iter=2`; {} for DI-engine's `file.py:123`."""
    if not _STEPS.match(where):
        return {}
    return {axis: int(value) for axis, value in (pair.split("=") for pair in where.split())}


def read_blocks(path: Path) -> list[Block]:
    """Every block of a text log, in order: grids after an empty message, and
    `collect end:` with its `key: value` lines."""
    blocks: list[Block] = []
    names: list[str] | None = None
    current: Block | None = None  # the block whose lines may follow
    lines_block = False
    for line in path.read_text(encoding="utf-8").splitlines():
        prefix = _PREFIX.match(line)
        if prefix:
            message = prefix.group(3)
            current, lines_block = None, False
            if message in ("", "collect end:"):
                current = Block(_steps(prefix.group(2)))
                blocks.append(current)
                lines_block = message == "collect end:"
        elif current is None:
            continue
        elif lines_block and (match := _LINE.match(line)):
            current.values[match.group(1)] = parse_value(match.group(2))
        elif line.startswith("| Name "):
            names = _cells(line)[1:]
        elif line.startswith("| Value ") and names is not None:
            current.values.update(zip(names, (parse_value(cell) for cell in _cells(line)[1:])))
            names = None
    return blocks


def read_info_lines(path: Path) -> list[str]:
    """The messages of the `[time][where][INFO] message` lines other than block
    starts (empty, `collect end:`) and the learner's iteration lines."""
    messages = [m.group(3) for m in map(_PREFIX.match, path.read_text(encoding="utf-8").splitlines()) if m]
    return [m for m in messages if m not in ("", "collect end:") and not re.search(r"=== Training Iteration \d+ Result ===$", m)]


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
    """True if one of the values written at `step` equals `value` to `rel` or to the
    text's 6 decimals (DI-engine's `{:.6f}` grids)."""
    return any(abs(v - value) <= rel * abs(value) + 1e-6 for v in points.get(step, []))
