"""What rltrack knows about SpinningUp, as data and pure functions: its step
columns, which namespace a stored key belongs to, the learner losses of the
stage block, and the canonical (DI-engine) names of its columns.

The adapter (rltrack.adapters.spinup, the drop-in EpochLogger) and the run
database's reader of SpinningUp output dirs (rltrack.runs.readers_foreign)
both read it here; neither imports the other.
"""

from __future__ import annotations

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
