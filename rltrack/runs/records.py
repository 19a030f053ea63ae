"""What every run reader returns, whichever framework wrote the directory.

`RunInfo` is a run's description (where, when, who, which configuration);
`Sample` is one numeric value at one point of one or more named step axes.
Readers for rltrack's own run directories and for directories written by other
tools (`rltrack.runs.readers`) produce both, so the index, `Run`, plots and
exports never care where a run came from.

Also here, because several readers need them: `config_literal` reads a
`total_config.py` (rltrack's bare literal, or DI-engine's `exp_config = {...}`)
without executing it, and `with_canonical` adds the canonical twin of every
native key the vocabulary knows.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from rltrack.core.events import NUMERIC_KINDS, Event
from rltrack.core.values import flatten
from rltrack.frameworks.hparams import is_setting

#: Hyperparameter values kept in `RunInfo.hparams` (the index stores these).
_SCALAR_TYPES = (bool, int, float, str)
#: Longer strings (reprs of functions, paths of whole trees) are not hyperparameters one filters on.
MAX_HPARAM_TEXT = 200


@dataclass(slots=True)
class Sample:
    """One value of `<namespace>/<key>` at `steps` (the first axis is the primary one)."""

    namespace: str
    key: str
    value: float
    steps: dict[str, int]
    time: float | None = None
    kind: str = "scalars"  # or "timing": a duration in seconds

    @property
    def tag(self) -> str:
        return f"{self.namespace}/{self.key}" if self.namespace else self.key

    @property
    def step(self) -> int | None:
        for value in self.steps.values():
            return value
        return None


@dataclass(slots=True)
class RunInfo:
    """A run's description, as a reader finds it in the directory."""

    path: Path
    source: str  # framework that wrote the values: sb3, tune, rllib, acme, spinup, plain, di-engine
    writer: str  # what wrote the directory: "rltrack", or the foreign format's name
    task: str
    host: str
    ip: str
    start_unix: float
    status: str
    config: dict[str, Any] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)  # flat, `a/b` keys, scalar values
    tracked: dict[str, Any] = field(default_factory=dict)  # the hyperparameters named in the run's id
    backends: list[str] = field(default_factory=list)


def is_hparam(key: str, value: Any) -> bool:
    """Whether a flat config entry is a hyperparameter one compares runs by:
    a number, a boolean, None or a short string, under a key that names no
    output, logger or run name, and no object's repr (with its memory address)
    in the key or the value."""
    if value is not None and not isinstance(value, _SCALAR_TYPES):
        return False
    if isinstance(value, str) and len(value) > MAX_HPARAM_TEXT:
        return False
    return all(is_setting(part, value) for part in (key, *key.split("/")))  # the whole key too: a repr may hold a "/"


def scalar_hparams(config: dict[str, Any]) -> dict[str, Any]:
    """The flat `a/b` view of a nested config, keeping the hyperparameters (`is_hparam`)."""
    return {key: value for key, value in flatten(config).items() if is_hparam(key, value)}


def as_number(value: Any) -> float | None:
    """A float for numbers and numeric text ("0.5"), None for anything else (booleans included)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return float(value)
        except ValueError:
            return None
    return None


def config_literal(path: Path) -> dict[str, Any]:
    """The dict a `total_config.py` holds, read with `ast.literal_eval`, never executed.

    rltrack writes one bare literal; DI-engine and LightZero write
    `exp_config = {...}` (with `float("inf")` for infinities), sometimes
    several such assignments: those give `{name: value}`. Anything that is not
    a literal raises ValueError naming the file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        values: dict[str, Any] = {}
        for statement in tree.body:
            if isinstance(statement, ast.Expr):
                value = ast.literal_eval(_InfinityCalls().visit(statement.value))
                if not isinstance(value, dict):
                    raise ValueError(f"the literal is a {type(value).__name__}, not a dict")
                values.update(value)
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                values[statement.targets[0].id] = ast.literal_eval(_InfinityCalls().visit(statement.value))
            else:
                raise ValueError(f"line {statement.lineno} is not a literal or `name = literal`")
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise ValueError(f"{path}: not a config literal ({exc})") from None
    if list(values) == ["exp_config"] and isinstance(values["exp_config"], dict):  # DI-engine's single assignment
        return values["exp_config"]
    return values


class _InfinityCalls(ast.NodeTransformer):
    """`float("inf")` / `float('-inf')` / `float("nan")` -> constants; other calls stay (and literal_eval refuses them)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "float"
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.strip().lower().lstrip("+-") in ("inf", "infinity", "nan")
        ):
            return ast.copy_location(ast.Constant(float(node.args[0].value)), node)
        return node


def with_canonical(samples: Iterable[Sample]) -> Iterator[Sample]:
    """Every sample, plus a canonical twin for native keys the vocabulary maps
    (`rollout/ep_rew_mean` -> `collector/reward_mean`), so foreign runs share charts."""
    from rltrack.frameworks.canonical import native_to_canonical

    table = native_to_canonical()
    for sample in samples:
        yield sample
        canonical = table.get(sample.tag)
        if canonical is not None and canonical != sample.tag:
            namespace, _, key = canonical.partition("/")
            yield Sample(namespace, key, sample.value, sample.steps, sample.time, sample.kind)


def event_samples(events: Iterable[Event]) -> list[Sample]:
    """The numeric values of rltrack events (scalars, timings), one `Sample` each."""
    out: list[Sample] = []
    for event in events:
        if event.kind not in NUMERIC_KINDS:
            continue
        for key, raw in event.data.items():
            value = as_number(raw) if not isinstance(raw, float) else raw
            if value is not None:
                out.append(Sample(event.namespace, key, value, event.steps, event.time, event.kind))
    return out
