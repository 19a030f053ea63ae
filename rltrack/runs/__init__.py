"""The experiment database: every run directory under a root, whoever wrote it, as one table.

    run = rltrack.runs.load("runs/cartpole_ppo")            # or a run id from `rltrack runs ls`
    run.metrics["collector/reward_mean"]                    # [(step, value), ...]
    rltrack.runs.query("runs", where="lr < 0.01 and env_id == 'CartPole-v1'", sort="-best/evaluator/reward_mean")
    rltrack.runs.compare_runs("runs", metric="collector/reward_mean", group_by=["lr"]).aggregates   # IQM etc. with intervals

`Run` (rltrack.runs.run) reads one directory; the readers (rltrack.runs.readers,
rltrack.runs.readers_foreign) know rltrack's layout and SB3, Tune, SpinningUp
and DI-engine directories; the index (rltrack.runs.index) is the SQLite table
queries read (rltrack.runs.query). Nothing here imports pandas, matplotlib or
pyarrow until a function that needs them is called.
"""

from typing import Any

from rltrack.runs.index import load, rebuild, refresh, resolve, update_run
from rltrack.runs.query import QueryError, query
from rltrack.runs.run import Run, open_run

__all__ = ["QueryError", "Run", "load", "open_run", "query", "rebuild", "refresh", "resolve", "update_run"]


def __getattr__(name: str) -> Any:
    """`compare_runs` and `Comparison` (rltrack.runs.analysis, which needs numpy) are imported on first use."""
    if name in ("Comparison", "compare_runs"):
        from rltrack.runs import analysis

        return getattr(analysis, name)
    raise AttributeError(f"module 'rltrack.runs' has no attribute {name!r}")
