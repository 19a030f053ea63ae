"""A real DI-engine run's files (tests/helpers/fixtures/dingine_dqn_cartpole, DI-engine
0.5.3's serial DQN on CartPole, see the README there) against rltrack.

* `rltrack runs` indexes the directory where it lies: task, host, config,
  final and best metrics equal what its own files say;
* `rltrack plot` draws its values: the plotted points equal the TensorBoard
  scalars read with TensorBoard's EventAccumulator and the text logs' tables;
* rltrack's own local files for the same records read as DI-engine's: each
  `*_logger.txt` has the same lines once the time and the `[file:line]` slot
  are set aside (minus the differences README lists: `[RANK0]: `, the model
  print and the checkpoint lines of DI-engine's learner), and the TensorBoard
  file has the same tags at the same steps on both axes.

* rltrack's buffer throughput tags equal those of a second real run, with
  DI-engine's advanced replay buffer (fixtures/dingine_dqn_cartpole_advanced).

DI-engine is not needed: the fixtures are static files.
"""

from __future__ import annotations

import json
import pickle
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stage_reader import Block, read_blocks, read_info_lines, read_tfevents

import rltrack
from rltrack.frameworks import stages
from rltrack.adapters.blocks import emit_block

pytest.importorskip("tensorboard")

FIXTURE = Path(__file__).parents[1] / "helpers" / "fixtures" / "dingine_dqn_cartpole"
#: DI-engine's logging prefix: `[time][file.py:line][INFO] `; rltrack puts the steps in the middle slot.
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]\[[^\]]*\]\[INFO\] ", re.MULTILINE)
#: What README lists as differing on purpose, in DI-engine's learner log.
LEARNER_ONLY_DI = re.compile(r"\[RANK0\]: ")


def rltrack_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrack.cli", *args], check=False, capture_output=True, text=True, timeout=300)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A runs root holding a copy of the fixture (the index is written beside it)."""
    shutil.copytree(FIXTURE, tmp_path / "root" / "cartpole_dqn_seed0")
    return tmp_path / "root"


def test_the_fixture_is_a_real_dqn_run_with_several_evaluations() -> None:
    evaluations = read_blocks(FIXTURE / "log" / "evaluator" / "evaluator_logger.txt")
    assert [b.values["train_iter"] for b in evaluations] == [0.0, 100.0, 200.0]
    assert len({b.values["reward_mean"] for b in evaluations}) > 1  # values that differ, so a plot can be wrong
    assert sum(f.stat().st_size for f in FIXTURE.rglob("*") if f.is_file()) < 100_000


# ---- rltrack runs -------------------------------------------------------------------


def test_runs_ls_indexes_the_di_engine_directory_with_its_config_and_metrics(root: Path) -> None:
    done = rltrack_cli("runs", "ls", "--root", str(root), "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    exp_config = runpy.run_path(str(FIXTURE / "total_config.py"))["exp_config"]  # the fixture's own reading of its config
    scalars = read_tfevents(FIXTURE / "log" / "serial")
    assert (row["writer"], row["source"], row["status"]) == ("di-engine", "di-engine", "finished")  # the learner log's end, see below
    assert exp_config["exp_name"] == "cartpole_dqn_seed0" and row["task"] == "cartpole_dqn"  # the seeds' experiment
    assert row["host"] == next((FIXTURE / "log" / "serial").glob("events.*")).name.split(".", 4)[4]
    assert row["policy/learn/learning_rate"] == exp_config["policy"]["learn"]["learning_rate"]
    assert row["policy/eval/evaluator/eval_freq"] == exp_config["policy"]["eval"]["evaluator"]["eval_freq"] == 100
    evaluations = [v for _, values in sorted(scalars["evaluator_step/reward_mean"].items()) for v in values]
    assert row["evaluator/reward_mean"] == pytest.approx(evaluations[-1]) and row["best/evaluator/reward_mean"] == pytest.approx(max(evaluations))
    losses = [v for _, values in sorted(scalars["learner_iter/total_loss_avg"].items()) for v in values]
    assert row["learner/total_loss_avg"] == pytest.approx(losses[-1]) and row["best/learner/total_loss_avg"] == pytest.approx(min(losses))
    where = rltrack_cli("runs", "ls", "--root", str(root), "--json", "--where", "policy/learn/learning_rate==0.001 and seed==0")
    assert [r["path"] for r in json.loads(where.stdout)] == ["cartpole_dqn_seed0"]
    assert json.loads(rltrack_cli("runs", "ls", "--root", str(root), "--json", "--where", "seed==1").stdout) == []


def test_status_is_finished_once_the_pipeline_wrote_result_pkl_or_its_final_checkpoint(root: Path) -> None:
    """DI-engine's serial pipeline ends with the learner's `after_run` checkpoint
    (`learner save ckpt in .../iteration_300.pth.tar`, an iteration with no table:
    the learner stopped before training it) and then writes result.pkl. A run
    cut before that end is "killed"; one that stopped right after a periodic
    checkpoint (which follows its own iteration's table) is too."""
    from rltrack.runs import query

    learner_log = root / "cartpole_dqn_seed0" / "log" / "learner" / "learner_logger.txt"
    whole = learner_log.read_text(encoding="utf-8")
    assert whole.rstrip().endswith("iteration_300.pth.tar")  # the fixture: a finished run without its result.pkl
    assert list(query(root)["status"]) == ["finished"]
    learner_log.write_text(whole[: whole.rindex("[20")], encoding="utf-8")  # without its end: the last table is 250's
    assert list(query(root)["status"]) == ["killed"]
    periodic = whole.index("iteration_200.pth.tar") + len("iteration_200.pth.tar\n")
    learner_log.write_text(whole[:periodic], encoding="utf-8")  # ends with iteration 200's table and its checkpoint
    assert list(query(root)["status"]) == ["killed"]
    (root / "cartpole_dqn_seed0" / "result.pkl").write_bytes(pickle.dumps({"stop": True, "env_step": 2000, "train_iter": 200}))
    assert list(query(root)["status"]) == ["finished"]  # the index notices the new file


def test_two_seeds_are_one_experiment_and_one_plot_group(root: Path) -> None:
    """DI-engine names each seed's experiment (`cartpole_dqn_seed0`, `..._seed1`):
    `exp_name` is not a hyperparameter, the seed is not a grouping key."""
    from rltrack.runs import query
    from rltrack.runs.plot import plot_runs
    from rltrack.cli.plot_command import select_runs

    second = root / "cartpole_dqn_seed1"
    shutil.copytree(FIXTURE, second)
    config = second / "total_config.py"
    config.write_text(config.read_text().replace("'exp_name': 'cartpole_dqn_seed0'", "'exp_name': 'cartpole_dqn_seed1'").replace("'seed': 0", "'seed': 1"))
    table = query(root)
    assert list(table["task"]) == ["cartpole_dqn", "cartpole_dqn"] and sorted(table["seed"]) == [0, 1]
    assert "exp_name" not in table.columns
    runs, _ = select_runs(["^cartpole_dqn/"], root)
    (curve,) = plot_runs(runs, "evaluator/reward_mean").curves
    assert curve.label == "all runs" and len(curve.runs) == 2 and set(curve.count) == {2}


# ---- rltrack plot -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "axis", "tag"),
    [
        ("evaluator/reward_mean", "env_steps", "evaluator_step/reward_mean"),
        ("evaluator/reward_mean", "train_iter", "evaluator_iter/reward_mean"),
        ("collector/reward_mean", "env_steps", "collector_step/reward_mean"),
        ("learner/total_loss_avg", "train_iter", "learner_iter/total_loss_avg"),
    ],
)
def test_plot_draws_the_values_of_the_tensorboard_file(root: Path, tmp_path: Path, metric: str, axis: str, tag: str) -> None:
    from rltrack.runs.plot import plot_runs
    from rltrack.cli.plot_command import select_runs

    points = sorted(read_tfevents(FIXTURE / "log" / "serial")[tag].items())
    runs, unmatched = select_runs(["^cartpole_dqn/"], root)
    assert unmatched == [] and len(runs) == 1
    x, y = plot_runs(runs, metric, x_axis=axis).figure.axes[0].get_lines()[0].get_data()
    assert list(x) == [step for step, _ in points]
    assert list(y) == [values[0] for _, values in points]  # one value a step, as written

    out = tmp_path / "plot.png"
    done = rltrack_cli("plot", "--root", str(root), "--metric", metric, "--x", axis, "^cartpole_dqn/", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"all runs: 1 run(s), {len(points)} points", str(out)]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plotted_evaluations_equal_the_evaluator_text_log(root: Path) -> None:
    from rltrack.runs.plot import plot_runs
    from rltrack.cli.plot_command import select_runs

    tables = read_blocks(FIXTURE / "log" / "evaluator" / "evaluator_logger.txt")
    runs, _ = select_runs(["^cartpole_dqn/"], root)
    for key in ("reward_mean", "reward_max", "avg_envstep_per_sec"):
        x, y = plot_runs(runs, f"evaluator/{key}", x_axis="train_iter").figure.axes[0].get_lines()[0].get_data()
        assert list(x) == [b.values["train_iter"] for b in tables]
        assert list(y) == pytest.approx([b.values[key] for b in tables], abs=1e-6, rel=1e-6)  # the text's {:.6f}


# ---- rltrack's own files for the same records ------------------------------------------


def _learner_blocks(text_log: Path) -> list[tuple[int, Block]]:
    """(train_iter, table) of DI-engine's learner log: `=== Training Iteration N Result ===` then its grids."""
    iterations = [int(n) for n in re.findall(r"=== Training Iteration (\d+) Result ===", text_log.read_text())]
    return list(zip(iterations, read_blocks(text_log), strict=True))


def _series(scalars: dict[str, dict[int, list[float]]], tag: str) -> list[int]:
    return sorted(scalars[tag])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An rltrack run (local backend, DI-engine's two TensorBoard axes) sent the
    fixture's records: its collector, learner and evaluator blocks with their
    values, steps and the evaluator's episode lines, in the fixture's order."""
    scalars = read_tfevents(FIXTURE / "log" / "serial")
    records: list[tuple[float, str, dict[str, Any], dict[str, int], list[str]]] = []
    collections = read_blocks(FIXTURE / "log" / "collector" / "collector_logger.txt")
    for block, it, step in zip(collections, _series(scalars, "collector_iter/reward_mean"), _series(scalars, "collector_step/reward_mean"), strict=True):
        records.append((it + 0.5, "collector", block.values, {"env_steps": step, "train_iter": it}, []))
    for (it, block), step in zip(_learner_blocks(FIXTURE / "log" / "learner" / "learner_logger.txt"), _series(scalars, "learner_step/cur_lr_avg"), strict=True):
        records.append((it + 0.2, "learner", block.values, {"env_steps": step, "train_iter": it}, []))
    evaluator_log = FIXTURE / "log" / "evaluator" / "evaluator_logger.txt"
    episodes = [re.fullmatch(r"\[EVALUATOR\]env (\d+) finish episode, final reward: (\S+), current episode: (\d+)", line) for line in read_info_lines(evaluator_log)]
    evaluations = read_blocks(evaluator_log)
    done = 0
    for block, step in zip(evaluations, _series(scalars, "evaluator_step/reward_mean"), strict=True):
        values = {k: v for k, v in block.values.items() if k != "eval_episode_return_mean"}
        values["each_reward"] = values.pop("eval_episode_return")
        mine, done = episodes[done : done + int(block.values["episode_count"])], done + int(block.values["episode_count"])
        lines = stages.evaluator_info_lines([float(m[2]) for m in mine], env_ids=[int(m[1]) for m in mine])
        records.append((block.values["train_iter"] + 0.1, "evaluator", values, {"env_steps": step, "train_iter": int(block.values["train_iter"])}, lines))
    config = {
        "run": {"root": str(tmp_path_factory.mktemp("replay")), "name": "cartpole_dqn_seed0"},
        "backends": {"use": ["local"], "local": {"tb_axes": ["iter", "step"]}},
    }
    logger = rltrack.make_logger(config)
    for _, namespace, values, steps, lines in sorted(records, key=lambda r: r[0]):  # DI-engine's order: evaluate, collect, train
        emit_block(logger, namespace, values, steps, info_lines=lines)
    logger.close(timeout=None)
    return logger.run_dir


def _layout(text: str) -> str:
    """The text with each line's time and `[where]` slot set aside."""
    return PREFIX.sub("[T][W][INFO] ", text)


@pytest.mark.parametrize("namespace", ["collector", "evaluator"])
def test_collector_and_evaluator_logs_have_di_engines_lines(replayed: Path, namespace: str) -> None:
    mine = (replayed / "log" / namespace / f"{namespace}_logger.txt").read_text()
    theirs = (FIXTURE / "log" / namespace / f"{namespace}_logger.txt").read_text()
    assert mine.count("[INFO] ") == theirs.count("[INFO] ") > 3
    assert _layout(mine) == _layout(theirs)


def test_learner_log_has_di_engines_tables_and_iteration_lines(replayed: Path) -> None:
    mine = (replayed / "log" / "learner" / "learner_logger.txt").read_text()
    theirs = (FIXTURE / "log" / "learner" / "learner_logger.txt").read_text()
    first = theirs.index("=== Training Iteration 0 ")
    theirs = LEARNER_ONLY_DI.sub("", theirs[theirs.rindex("\n", 0, first) + 1 :])
    theirs = "".join(line for line in theirs.splitlines(keepends=True) if "save ckpt in" not in line)
    assert _layout(mine) == _layout(theirs)
    assert mine.count("=== Training Iteration") == 6


def test_tensorboard_tags_and_steps_are_di_engines(replayed: Path) -> None:
    """Every tag of DI-engine's file, at the same steps with the same values (the
    text's 6 decimals for replayed grid values), `evaluator_*/eval_episode_return_mean`
    (the tag DI-engine users plot) included, except the deque buffer's
    `buffer_iter/` count, which no rltrack record holds; no tag DI-engine leaves out is added."""
    theirs = read_tfevents(FIXTURE / "log" / "serial")
    mine = read_tfevents(replayed / "log" / "serial")
    expected = {tag for tag in theirs if not tag.startswith("buffer_")}
    assert {"evaluator_iter/eval_episode_return_mean", "evaluator_step/eval_episode_return_mean"} <= expected
    assert set(mine) == expected
    assert "collector_step/total_envstep_count" not in mine and "evaluator_iter/train_iter" not in mine
    for tag in expected:
        assert sorted(mine[tag]) == sorted(theirs[tag]), tag
        for step, values in theirs[tag].items():
            assert mine[tag][step] == pytest.approx(values, rel=1e-6, abs=1e-6), (tag, step)


# ---- the advanced replay buffer's throughput tables --------------------------------

ADVANCED = FIXTURE.parent / "dingine_dqn_cartpole_advanced"
#: DI-engine's PeriodicThruputMonitor table.
THROUGHPUT = ("pushed_in", "sampled_out", "removed", "current_have")


def test_buffer_throughput_tables_have_di_engines_tags_and_steps(tmp_path: Path) -> None:
    """DI-engine's advanced buffer plots each throughput table as
    `buffer_sec/<key>` at the table's number (0, 1, 2, ...), not against
    iterations or env steps; rltrack writes the same tables the same way."""
    di_scalars = read_tfevents(ADVANCED / "log" / "serial")
    tables = [b for b in read_blocks(ADVANCED / "log" / "buffer" / "buffer_logger.txt") if "pushed_in" in b.values]
    assert len(tables) > 10 and all(f"buffer_sec/{key}" in di_scalars for key in THROUGHPUT)
    config = {"run": {"root": str(tmp_path), "name": "advanced"}, "backends": {"use": ["local"], "local": {"tb_axes": ["iter", "step"]}}}
    with rltrack.make_logger(config) as logger:
        for n, table in enumerate(tables):
            emit_block(logger, "buffer", table.values, {"env_steps": 64 * n, "train_iter": 8 * n})  # steps a live adapter has
    ours = read_tfevents(logger.run_dir / "log" / "serial")
    assert set(THROUGHPUT) == stages.THROUGHPUT_KEYS
    for key in THROUGHPUT:
        assert ours[f"buffer_sec/{key}"] == di_scalars[f"buffer_sec/{key}"]
        assert f"buffer_iter/{key}" not in ours and f"buffer_step/{key}" not in ours
