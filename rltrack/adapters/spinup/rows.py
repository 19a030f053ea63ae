"""What rltrack knows about SpinningUp, as data and pure functions: its step
columns, which namespace a stored key belongs to, the learner losses of the
stage block, the canonical (DI-engine) names of its columns, and the events
one `dump_tabular()` row becomes (its columns, and DI-engine's stage blocks
computed from the raw values stored that epoch).

The stage blocks (`rltrack.frameworks.stages`, `stage_blocks`) are computed from the raw values
`store`d this epoch, not from the table's statistics: a `collector` block
from `EpRet` (and `EpLen`: `episode_count`, `reward_mean/std/max/min`,
`each_reward`, `avg_envstep_per_episode`; `envstep_count` is the growth of
`TotalEnvInteracts` since the last row, and running totals follow); an
`evaluator` block, with one `[INFO]` line per test episode, from
`TestEpRet`/`TestEpLen`; a `learner` block of `<loss>_avg` (the mean of the
epoch's stored values) from the keys in `LEARNER_LOSSES`. A block needs its
key to be passed to `log_tabular(key)` that epoch. SpinningUp logs no
collection time and no learning rate, so the rates, `collect_time`,
`evaluate_time` and `cur_lr_avg` are absent. Where a block is sent, it is the
namespace's canonical set: the canonical twins of the table's columns
(`collector/reward_mean` for `AverageEpRet`, ...) are then not sent as well.

The drop-in EpochLogger (rltrack.adapters.spinup.logger), the declaration
(its `CANONICAL`) and the reader of SpinningUp's output dirs
(rltrack.adapters.spinup.folders) read it here.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from rltrack.core.events import Event
from rltrack.frameworks.stages import (
    CollectorStats,
    LearnerAverages,
    block_events,
    evaluator_block,
    evaluator_info_lines,
)

SOURCE = "spinup"

#: SpinningUp column -> step axis. The first axis present in a row is the primary one.
STEP_COLUMNS: dict[str, str] = {"TotalEnvInteracts": "env_steps", "Epoch": "epoch"}

STAT_PREFIXES = ("Average", "Std", "Max", "Min")

#: Stored learner keys -> their learner-block name (sent as `<name>_avg`).
LEARNER_LOSSES: dict[str, str] = {
    "LossPi": "policy_loss",
    "LossV": "value_loss",
    "LossQ": "critic_loss",
    "KL": "approx_kl",
    "ClipFrac": "clipfrac",
    "Entropy": "entropy",  # the (positive) policy entropy, as RLlib's `entropy` maps
}
#: Stored keys whose raw values of the epoch feed the stage blocks.
EPISODE_KEYS = ("EpRet", "EpLen", "TestEpRet", "TestEpLen")


def _canonical_table() -> dict[str, str]:
    table: dict[str, str] = {}
    groups = (
        ("collector", "EpRet", "reward"),
        ("evaluator", "TestEpRet", "reward"),
    )
    for namespace, key, name in groups:
        table[f"{namespace}/{key}"] = f"{namespace}/{name}_mean"  # log_tabular(key, average_only=True)
        for prefix, stat in zip(STAT_PREFIXES, ("mean", "std", "max", "min")):
            table[f"{namespace}/{prefix}{key}"] = f"{namespace}/{name}_{stat}"
    for namespace, key in (("collector", "EpLen"), ("evaluator", "TestEpLen")):
        table[f"{namespace}/{key}"] = f"{namespace}/avg_envstep_per_episode"
        table[f"{namespace}/Average{key}"] = f"{namespace}/avg_envstep_per_episode"
    for key, name in LEARNER_LOSSES.items():
        table[f"learner/{key}"] = f"learner/{name}_avg"  # average_only=True, as SpinningUp's algorithms log them
        table[f"learner/Average{key}"] = f"learner/{name}_avg"
    return table


#: native flat key (`<namespace>/<SpinningUp column>`) -> canonical flat key (DI-engine vocabulary).
#: `Epoch` and `TotalEnvInteracts` are step axes (`epoch`, `env_steps`), not metrics.
CANONICAL: dict[str, str] = _canonical_table()


def namespace_of(key: str) -> str:
    """The rltrack namespace of a stored SpinningUp key (`EpRet` -> collector, `LossPi` -> learner)."""
    if key in ("EpRet", "EpLen"):
        return "collector"
    if key.startswith("TestEp"):
        return "evaluator"
    if key == "Time":
        return "time"
    return "learner"


#: Where a column goes: whether it is a statistic (None for step columns) and
#: its places, (namespace, key, stage): the column as written (namespace "",
#: filed locally under its stage) and its canonical twin. Made by the adapter,
#: which knows `run.names`.
Route = tuple[bool | None, tuple[tuple[str, str, str], ...]]


@dataclass
class RowState:
    """One EpochLogger's rltrack run as its rows' events need it: the run's
    name, its `run.names` mode, and the running totals of its stage blocks
    (changed on the pipeline thread only)."""

    run: str
    names: str
    collector: CollectorStats = field(default_factory=CollectorStats)
    last_env_steps: int = 0


def row_events(now: float, row: dict[str, Any], steps: dict[str, Any], raw: dict[str, list[float]], routes: dict[str, Route], state: RowState) -> list[Event]:
    """Pipeline thread: the events of one row, its columns (as written, and
    their canonical names, as `routes` says) and this epoch's stage blocks."""
    blocks = stage_blocks(row, raw, state) if state.names != "native" else {}
    groups: dict[tuple[str, str, bool], dict[str, Any]] = {}
    for column, val in row.items():
        statistic, places = routes[column]
        if statistic is None:
            continue
        for namespace, key, stage in places:
            if key != column and namespace in blocks:  # a block replaces the canonical twins
                continue
            data = groups.get((namespace, stage, statistic))
            if data is None:
                data = groups[namespace, stage, statistic] = {}
            data[key] = val
    run = state.run
    events = []
    for (namespace, stage, statistic), data in groups.items():
        kind = "timing" if (stage or namespace) == "time" else "scalars"
        events.append(Event(now, data, kind, namespace, dict(steps), SOURCE, "0", run, preaggregated=statistic, stage=stage))
    for namespace, (block, info_lines) in blocks.items():
        events += block_events(namespace, block, steps, now, run, source=SOURCE, info_lines=info_lines)
    return events


def stage_blocks(row: dict[str, Any], raw: dict[str, list[float]], state: RowState) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """namespace -> (block, [INFO] lines) of this epoch, from the raw values stored in it."""
    blocks: dict[str, tuple[dict[str, Any], list[str]]] = {}
    envsteps = None
    total = row.get("TotalEnvInteracts")
    if isinstance(total, numbers.Real) and math.isfinite(total):  # numpy's scalars are registered Reals
        envsteps, state.last_env_steps = int(total) - state.last_env_steps, int(total)
    if "EpRet" in raw:
        returns = raw["EpRet"]
        block = state.collector.stage(episode_rewards=returns, episode_lengths=_lengths(returns, raw.get("EpLen")), envstep_count=envsteps)
        blocks["collector"] = (block, [])
    if "TestEpRet" in raw:
        returns = raw["TestEpRet"]
        block = evaluator_block(episode_rewards=returns, episode_lengths=_lengths(returns, raw.get("TestEpLen")))
        blocks["evaluator"] = (block, evaluator_info_lines(returns))
    averages = LearnerAverages()
    for key, name in LEARNER_LOSSES.items():
        for value in raw.get(key, ()):
            averages.add({name: value})
    if averages:
        blocks["learner"] = (averages.take(), [])
    return blocks


def _lengths(returns: list[float], lengths: list[float] | None) -> list[float] | None:
    """The episode lengths stored beside `returns`, when there is one per episode."""
    return lengths if lengths is not None and len(lengths) == len(returns) else None
