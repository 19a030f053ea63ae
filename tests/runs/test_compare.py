"""`rltrack compare` and `rltrack.runs.compare_runs` over runs whose scores are known by construction.

The runs are written with the plain API (`rltrack.make_logger`, local files only):
two learning rates whose returns are drawn around different levels, three tasks,
four seeds each, odd seeds on another x grid (every 150 env steps, 14 points)
than even ones (every 100, 20 points). Every expected score is computed here from
the values written; aggregates and intervals are checked against rliable on the
same score matrices (tests/helpers/rliable_reference.py). Runs of two libraries
(SB3's own logger and a CleanRL-style TensorBoard folder) compare on one canonical metric.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rltrack
from rliable_reference import import_rliable
from rltrack.cli.entry import main
from rltrack.runs import compare_runs, load

METRIC = "collector/reward_mean"
TASKS = {"walker": 100.0, "hopper": 40.0, "cheetah": 250.0}  # each task's scale
LEVELS = {0.001: 0.5, 0.01: 0.8}  # each learning rate's level, a share of the task's scale
SEEDS = 4
REPS = 2000


@dataclass
class Written:
    run_id: str
    lr: float
    task: str
    x: np.ndarray
    y: np.ndarray


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Written]]:
    root = tmp_path_factory.mktemp("compare")
    rng = np.random.default_rng(44)
    written = []
    for task, scale in TASKS.items():
        for lr, level in LEVELS.items():
            for seed in range(SEEDS):
                x = np.arange(20) * 100 if seed % 2 == 0 else np.arange(14) * 150
                y = scale * level * (x / x[-1]) + rng.normal(scale=scale * 0.1, size=len(x))
                config = {"run": {"root": str(root), "name": f"{task}_lr{lr}_s{seed}", "task": task, "tracked": ["lr", "seed"]},
                          "backends": {"use": ["local"]}}  # fmt: skip
                with rltrack.make_logger(config) as logger:
                    logger.log_hparams({"lr": lr, "seed": seed, "env_id": f"{task.title()}-v4"})
                    for iteration, (step, value) in enumerate(zip(x, y)):
                        logger.write({"reward_mean": float(value)}, step={"env_steps": int(step), "train_iter": iteration}, namespace="collector")
                        logger.dump()
                written.append(Written(load(logger.run_dir).id, lr, task, x.astype(float), y))
    return root, written


def expected(run: Written, rule: str) -> float:
    if rule == "max":
        return float(np.max(run.y))
    if rule == "auc":
        return float(sum((a + b) / 2 * (x1 - x0) for a, b, x0, x1 in zip(run.y, run.y[1:], run.x, run.x[1:])) / (run.x[-1] - run.x[0]))
    count = int(rule.split(":")[1]) if ":" in rule else math.ceil(len(run.y) / 10)
    return float(np.mean(run.y[-count:]))


def compare_json(root: Path, capsys: pytest.CaptureFixture[str], *options: str) -> dict:
    code = main(["compare", "--root", str(root), "--metric", METRIC, "--json", "--reps", str(REPS), *options])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize("rule", ["last", "last:3", "auc", "max"])
def test_each_runs_score_is_computed_from_its_own_values(made, capsys, rule):
    root, written = made
    document = compare_json(root, capsys, "--score", rule)
    assert set(document) == {"metric", "score", "normalization", "tasks", "groups", "probability_of_improvement", "reps", "confidence"}
    assert document["metric"] == METRIC and document["score"].startswith(rule + ":") and document["normalization"] is None
    assert document["tasks"] == sorted(TASKS) and document["reps"] == REPS and document["confidence"] == 0.95
    assert sorted(document["groups"]) == ["lr=0.001", "lr=0.01"]  # seeds and env_id (one per task) make no groups
    by_id = {run.run_id: run for run in written}
    seen = 0
    for label, group in document["groups"].items():
        for task, entries in group["runs"].items():
            for entry in entries:
                run = by_id[entry["run"]]
                assert (f"lr={run.lr}", run.task) == (label, task)
                assert entry["score"] == pytest.approx(expected(run, rule), abs=1e-9)
                seen += 1
    assert seen == len(written)


def score_matrix(written: list[Written], lr: float, rule: str = "last") -> np.ndarray:
    """runs x tasks, tasks in sorted order, as rliable takes them."""
    return np.array([[expected(run, rule) for run in written if run.lr == lr and run.task == task] for task in sorted(TASKS)]).T


def test_aggregates_and_improvement_agree_with_rliable(made, capsys):
    library, metrics = import_rliable()
    root, written = made
    document = compare_json(root, capsys)
    matrices = {f"lr={lr}": score_matrix(written, lr) for lr in LEVELS}
    tolerance = 0.02 * float(np.ptp(np.concatenate([m.ravel() for m in matrices.values()])))
    functions = {"iqm": metrics.aggregate_iqm, "median": metrics.aggregate_median, "mean": metrics.aggregate_mean,
                 "optimality_gap": metrics.aggregate_optimality_gap}  # fmt: skip
    for name, function in functions.items():
        points, intervals = library.get_interval_estimates(matrices, lambda m, f=function: np.array([f(m)]), reps=REPS)
        for label, matrix in matrices.items():
            ours = document["groups"][label][name]
            assert ours["value"] == pytest.approx(float(points[label][0]), abs=1e-9), name
            assert abs(ours["ci"][0] - intervals[label][0][0]) <= tolerance and abs(ours["ci"][1] - intervals[label][1][0]) <= tolerance, name
    high, low = matrices["lr=0.01"], matrices["lr=0.001"]
    points, intervals = library.get_interval_estimates({"p": [high, low]}, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps=REPS)
    pairs = {(p["x"], p["y"]): p for p in document["probability_of_improvement"]}
    assert set(pairs) == {("lr=0.001", "lr=0.01"), ("lr=0.01", "lr=0.001")}
    better = pairs[("lr=0.01", "lr=0.001")]
    assert better["value"] == pytest.approx(float(points["p"][0]), abs=1e-9) and better["value"] > 0.5
    assert abs(better["ci"][0] - intervals["p"][0][0]) <= 0.02 and abs(better["ci"][1] - intervals["p"][1][0]) <= 0.02
    assert pairs[("lr=0.001", "lr=0.01")]["value"] == pytest.approx(1 - better["value"], abs=1e-12)


def test_a_reference_table_normalizes_scores_and_is_named(made, capsys, tmp_path):
    root, written = made
    bounds = {task: (scale * 0.1, scale) for task, scale in TASKS.items()}
    toml = tmp_path / "refs.toml"
    toml.write_text("".join(f'[{task}]\nmin = {low}\nmax = {high}\n' for task, (low, high) in bounds.items()), encoding="utf-8")
    document = compare_json(root, capsys, "--reference", str(toml))
    assert str(toml) in document["normalization"] and "(score - min) / (max - min)" in document["normalization"]
    by_id = {run.run_id: run for run in written}
    for group in document["groups"].values():
        for task, entries in group["runs"].items():
            low, high = bounds[task]
            for entry in entries:
                assert entry["score"] == pytest.approx((expected(by_id[entry["run"]], "last") - low) / (high - low), abs=1e-9)
    csv = tmp_path / "refs.csv"
    csv.write_text("task,min,max\n" + "".join(f"{task},{low},{high}\n" for task, (low, high) in bounds.items()), encoding="utf-8")
    assert compare_json(root, capsys, "--reference", str(csv))["groups"] == document["groups"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"walker": {"min": 0, "max": 1}}), encoding="utf-8")
    assert main(["compare", "--root", str(root), "--metric", METRIC, "--reference", str(partial)]) == 2
    assert "task(s) 'cheetah', 'hopper' not in the reference table" in capsys.readouterr().err


def test_the_table_says_what_was_compared_and_csv_holds_the_same(made, capsys, tmp_path):
    root, _ = made
    assert main(["compare", "--root", str(root), "--metric", METRIC, "--task", "walker", "--score", "max", "--reps", "500"]) == 0
    text = capsys.readouterr().out
    assert "score:         max: each run's largest collector/reward_mean" in text
    assert "normalization: none (raw scores)" in text and "tasks:         walker\n" in text and "500 replications" in text
    assert "lr=0.001" in text and "lr=0.01" in text and "P(x > y)" in text
    out = tmp_path / "tables"
    assert main(["compare", "--root", str(root), "--metric", METRIC, "--task", "walker", "--score", "max", "--reps", "500", "--csv", str(out)]) == 0
    capsys.readouterr()
    aggregates = pd.read_csv(out / "aggregates.csv")
    document = compare_json(root, capsys, "--task", "walker", "--score", "max", "--reps", "500")
    for row in aggregates.itertuples():
        assert document["groups"][row.group][row.aggregate] == {"value": pytest.approx(row.value), "ci": [pytest.approx(row.lower), pytest.approx(row.upper)]}
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.csv" for n in (
        "comparison", "scores", "aggregates", "probability_of_improvement", "performance_profiles", "sample_efficiency"))  # fmt: skip


def test_the_python_api_returns_dataframes_and_curves_reach_each_x_with_the_runs_that_do(made):
    root, written = made
    comparison = compare_runs(root, task="hopper", metric=METRIC, reps=300)
    assert isinstance(comparison.aggregates, pd.DataFrame) and list(comparison.scores.columns) == ["group", "task", "run", "score", "raw_score"]
    assert len(comparison.scores) == 2 * SEEDS and comparison.axis == "env_steps"
    curves = comparison.curves
    last_x = curves["x"].max()
    assert last_x == pytest.approx(1950.0)  # odd seeds reach 1950, even ones 1900
    assert set(curves[curves["x"] == last_x]["runs"]) == {SEEDS // 2}
    first = curves[curves["x"] == 0.0]
    hopper = {lr: [run.y[0] for run in written if run.task == "hopper" and run.lr == lr] for lr in LEVELS}
    from scipy.stats import trim_mean

    for lr, values in hopper.items():
        assert first[first["group"] == f"lr={lr}"]["value"].item() == pytest.approx(trim_mean(values, 0.25))
    profile = comparison.profiles[comparison.profiles["group"] == "lr=0.01"]
    scores = comparison.scores[comparison.scores["group"] == "lr=0.01"]["score"].to_numpy()
    assert profile["value"].tolist() == [pytest.approx(np.mean(scores > tau)) for tau in profile["tau"]]
    assert profile["tau"].min() == comparison.scores["score"].min() and profile["value"].iloc[-1] == 0.0


def test_runs_of_two_libraries_compare_on_one_canonical_metric(tmp_path, capsys):
    """SB3's own logger (progress.csv: rollout/ep_rew_mean) and CleanRL's writer calls
    (TensorBoard: charts/episodic_return), both collector/reward_mean in rltrack's names."""
    from stable_baselines3.common.logger import configure
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "runs"
    finals = {"sb3": [], "tensorboard": []}
    for seed in range(3):
        sb3 = configure(str(root / f"sb3_ppo_seed{seed}"), ["csv"])
        cleanrl = SummaryWriter(str(root / f"CartPole-v1__ppo__{seed}__176424480{seed}"))
        for step in range(1, 11):
            sb3.record("rollout/ep_rew_mean", 10.0 * step + seed)
            sb3.record("time/total_timesteps", 128 * step)
            sb3.dump(step=128 * step)
            cleanrl.add_scalar("charts/episodic_return", np.array([20.0 * step + seed], dtype=np.float32), 128 * step)
        sb3.close()
        cleanrl.close()
        finals["sb3"].append(100.0 + seed)
        finals["tensorboard"].append(200.0 + seed)
    document = compare_json(root, capsys, "--group-by", "source", "--task-key", "none", "--score", "last:1")
    assert document["tasks"] == ["all"]
    assert {label: sorted(e["score"] for e in group["runs"]["all"]) for label, group in document["groups"].items()} == {
        f"source={source}": pytest.approx(values) for source, values in finals.items()
    }
    pairs = {(p["x"], p["y"]): p["value"] for p in document["probability_of_improvement"]}
    assert pairs[("source=tensorboard", "source=sb3")] == 1.0


def test_the_series_read_are_kept_in_the_index_until_the_run_changes(tmp_path, capsys):
    """The second comparison reads the series from the index; a run whose journal grows is read again."""
    import sqlite3

    from rltrack.core.events import Event
    from rltrack.runs.index import INDEX_NAME

    root = tmp_path / "runs"
    for seed in range(2):
        config = {"run": {"root": str(root), "name": f"s{seed}", "task": "cache"}, "backends": {"use": ["local"]}}
        with rltrack.make_logger(config) as logger:
            logger.log_hparams({"seed": seed})
            for i in range(5):
                logger.write({"reward_mean": float(10 * seed + i)}, step={"env_steps": 100 * i}, namespace="collector")
                logger.dump()
    first = compare_json(root, capsys, "--score", "last:1")
    with sqlite3.connect(root / INDEX_NAME) as db:
        assert db.execute("SELECT count(*) FROM series WHERE metric = ? AND axis = ''", (METRIC,)).fetchone() == (2,)
    assert compare_json(root, capsys, "--score", "last:1") == first  # from the index now
    journal = root / "s0" / "journal.jsonl"
    later = Event(2e9, {"reward_mean": 99.0}, namespace="collector", steps={"env_steps": 900}, run="s0").to_json()
    journal.write_text(journal.read_text(encoding="utf-8") + later + "\n", encoding="utf-8")
    again = compare_json(root, capsys, "--score", "last:1")
    assert sorted(e["score"] for e in again["groups"]["all runs"]["runs"]["cache"]) == [14.0, 99.0]
