"""`rltrack plot` and `rltrack.runs.plot`: a metric across runs, and one run's figures.

Runs are written by the real rltrack logger (two learning-rate groups, several
seeds, steps that differ per seed, one seed stopped early) and by SB3's own
logger (a foreign `progress.csv` directory, no rltrack). Every expected mean
and band is computed here from the values the test wrote, with pandas
(reindex on the union of x values + index interpolation inside each run's
range) and scipy's Student-t, not with the code under test.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from PIL import Image
from scipy import stats

import rltrack
from rltrack.cli.entry import main
from rltrack.journal import read_journal
from rltrack.runs import load
from rltrack.runs.plot import PlotError, plot_runs, t_quantile

METRIC = "collector/reward_mean"
TASK = "plotcheck"


@dataclass
class Written:
    """One run the fixture wrote: its group, and the x (env_steps) and values logged."""

    path: Path
    group: str
    x: list[int]
    y: list[float]


def write_rltrack_run(root: Path, lr: float, seed: int, steps: list[int], rng: np.random.Generator) -> Written:
    rewards = [lr * 1000 * i / 100 + float(rng.normal(scale=2.0)) for i in steps]
    config = {"run": {"root": str(root), "name": f"lr{lr}_seed{seed}", "task": TASK, "tracked": ["lr", "seed"]}}
    with rltrack.make_logger(config) as logger:
        logger.log_hparams({"lr": lr, "seed": seed, "env_id": "CartPole-v1"})
        for iteration, (step, reward) in enumerate(zip(steps, rewards)):
            logger.write({"reward_mean": reward}, step={"env_steps": step, "train_iter": iteration}, namespace="collector")
            logger.write({"total_loss": 1.0 / (iteration + 1)}, namespace="learner")
            with logger.timer("train"):
                sum(range(2000))
            logger.dump()
    return Written(logger.run_dir, f"lr={lr}", steps, rewards)


def write_sb3_native_run(path: Path, seed: int) -> Written:
    """SB3's own logger writing progress.csv as `model.learn` does (record, then dump at num_timesteps)."""
    from stable_baselines3.common.logger import configure

    rng = np.random.default_rng(100 + seed)
    sb3_logger = configure(str(path), ["csv"])
    steps = [128 * (i + 1) + 16 * seed for i in range(15)]
    rewards = [20.0 + step / 40 + float(rng.normal(scale=3.0)) for step in steps]
    for iteration, (step, reward) in enumerate(zip(steps, rewards), start=1):
        sb3_logger.record("rollout/ep_rew_mean", reward)
        sb3_logger.record("time/iterations", iteration)
        sb3_logger.record("time/total_timesteps", step)
        sb3_logger.dump(step=step)
    sb3_logger.close()
    return Written(path, "source=sb3", steps, rewards)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Written]]:
    """root, the rltrack runs (lr=0.001: 3 seeds on the same steps; lr=0.003: 4 seeds on
    shifted steps, seed 3 stopped early) and two SB3-native directories."""
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(7)
    same = [100 * i for i in range(20)]
    rltrack_runs = [write_rltrack_run(root, 0.001, seed, same, rng) for seed in range(3)]
    rltrack_runs += [
        write_rltrack_run(root, 0.003, seed, [100 * i + 7 * seed for i in range(12 if seed == 3 else 20)], rng) for seed in range(4)
    ]
    sb3_runs = [write_sb3_native_run(root / f"sb3_native_{seed}", seed) for seed in range(2)]
    return {"root": [Written(root, "", [], [])], "rltrack": rltrack_runs, "sb3": sb3_runs}


def expected_band(members: list[Written], smooth: int = 1, grid: list[float] | None = None) -> pd.DataFrame:
    """mean, lower, upper, count per x over `grid` (default: the union of the runs' x), by pandas and scipy."""
    grid = grid if grid is not None else sorted({x for run in members for x in run.x})
    columns = []
    for run in members:
        series = pd.Series(run.y, index=pd.Index(run.x, dtype=float)).rolling(smooth, min_periods=1).mean()
        every_x = pd.Index(sorted(set(grid) | set(run.x)), dtype=float)
        interpolated = series.reindex(every_x).interpolate(method="index", limit_area="inside")
        columns.append(interpolated.reindex(pd.Index(grid, dtype=float)))
    table = pd.concat(columns, axis=1)
    count = table.count(axis=1)
    mean = table.mean(axis=1)
    sem = table.std(axis=1, ddof=1) / np.sqrt(count)
    half = pd.Series([stats.t.ppf(0.975, n - 1) if n > 1 else np.nan for n in count], index=table.index) * sem
    return pd.DataFrame({"mean": mean, "lower": mean - half, "upper": mean + half, "count": count})


def assert_curve_matches(curve, expected: pd.DataFrame) -> None:
    np.testing.assert_allclose(curve.x, expected.index.to_numpy())
    np.testing.assert_array_equal(curve.count, expected["count"].to_numpy())
    for name in ("mean", "lower", "upper"):
        np.testing.assert_allclose(getattr(curve, name), expected[name].to_numpy(), rtol=1e-9, atol=1e-9, equal_nan=True)


def colour_pixels(png: Path, colour: str) -> int:
    """Pixels of `png` within a small distance of a matplotlib colour."""
    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=float)
    target = np.array(to_rgb(colour)) * 255
    return int((np.abs(pixels - target).max(axis=2) < 12).sum())


def test_t_quantile_equals_scipy():
    for dof in [*range(1, 40), 99, 500, 2000]:
        assert t_quantile(dof) == pytest.approx(stats.t.ppf(0.975, dof), rel=1e-12)


def test_group_means_and_bands_equal_an_independent_computation(made, tmp_path):
    runs = [load(written.path) for written in made["rltrack"]]
    result = plot_runs(runs, METRIC, x_axis="env_steps", group_by=["lr"], size=(800, 500))
    assert [curve.label for curve in result.curves] == ["lr=0.001", "lr=0.003"]
    for curve in result.curves:
        members = [written for written in made["rltrack"] if written.group == curve.label]
        assert sorted(curve.runs) == sorted(load(m.path).id for m in members)
        assert_curve_matches(curve, expected_band(members))
    early_end = made["rltrack"][-1].x[-1]
    shared_end = min(written.x[-1] for written in made["rltrack"][3:6])
    shifted = result.curves[1]
    after_early_end = (shifted.x > early_end) & (shifted.x <= shared_end)
    assert after_early_end.any() and set(shifted.count[after_early_end]) == {3}  # the seed stopped early is not extrapolated
    (legend,) = result.figure.legends
    assert [text.get_text() for text in legend.get_texts()] == ["lr=0.001 (n=3)", "lr=0.003 (n=4)"]

    png = tmp_path / "groups.png"
    result.save(str(png))
    assert Image.open(png).format == "PNG" and Image.open(png).size == (800, 500)
    for line in result.figure.axes[0].get_lines():
        assert colour_pixels(png, line.get_color()) > 200, f"the line {line.get_label()} is not in the PNG"


def test_seeds_on_the_same_steps_get_scipys_t_interval(made):
    members = [written for written in made["rltrack"] if written.group == "lr=0.001"]
    result = plot_runs([load(m.path) for m in members], METRIC, group_by=["lr"])
    (curve,) = result.curves
    values = np.array([m.y for m in members])
    low, high = stats.t.interval(0.95, len(members) - 1, loc=values.mean(axis=0), scale=stats.sem(values, axis=0))
    np.testing.assert_allclose(curve.x, members[0].x)
    np.testing.assert_allclose(curve.mean, values.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(curve.lower, low, rtol=1e-9)
    np.testing.assert_allclose(curve.upper, high, rtol=1e-9)


def test_runs_from_sb3s_own_logger_share_the_axes(made):
    written = made["rltrack"] + made["sb3"]
    runs = [load(w.path) for w in written]
    result = plot_runs(runs, METRIC, x_axis="env_steps", group_by=["source"])
    assert [curve.label for curve in result.curves] == ["source=plain", "source=sb3"]
    assert_curve_matches(result.curves[0], expected_band(made["rltrack"]))
    assert_curve_matches(result.curves[1], expected_band(made["sb3"]))


def test_smoothing_is_a_trailing_mean_per_run_before_alignment(made):
    members = [written for written in made["rltrack"] if written.group == "lr=0.003"]
    result = plot_runs([load(m.path) for m in members], METRIC, x_axis="env_steps", group_by=["lr"], smooth=4)
    assert_curve_matches(result.curves[0], expected_band(members, smooth=4))


def test_a_long_union_of_steps_becomes_an_even_grid(made):
    members = [written for written in made["rltrack"] if written.group == "lr=0.003"]
    result = plot_runs([load(m.path) for m in members], METRIC, x_axis="env_steps", group_by=["lr"], max_points=25)
    low, high = min(x for m in members for x in m.x), max(x for m in members for x in m.x)
    assert_curve_matches(result.curves[0], expected_band(members, grid=list(np.linspace(low, high, 25))))


def test_default_groups_are_the_hyperparameters_that_differ_except_seeds(made):
    result = plot_runs([load(w.path) for w in made["rltrack"]], METRIC)
    assert [curve.label for curve in result.curves] == ["lr=0.001", "lr=0.003"]


def test_runs_of_several_frameworks_are_grouped_by_source_not_by_keys_only_some_have(made):
    result = plot_runs([load(w.path) for w in made["rltrack"][:3] + made["sb3"]], METRIC, x_axis="env_steps")
    assert [(curve.label, len(curve.runs)) for curve in result.curves] == [("source=plain", 3), ("source=sb3", 2)]


def test_long_group_labels_keep_the_legend_inside_the_figure_and_readable(tmp_path):
    long_value = "a_description_of_the_network_" * 5
    for index in range(6):
        config = {"run": {"root": str(tmp_path), "name": f"long{index}", "task": "long"}}
        with rltrack.make_logger(config) as logger:
            logger.log_hparams({"policy": {"model": {"encoder": {"hidden_description": f"{long_value}{index}"}}},
                                "learning_rate_of_the_critic_network": 0.001 * index, "seed": index})  # fmt: skip
            for step in range(5):
                logger.write({"reward_mean": step * index}, step=step, namespace="collector")
    runs = [load(tmp_path / f"long{index}") for index in range(6)]
    result = plot_runs(runs, METRIC, size=(960, 600))
    assert len(result.curves) == 6 and all(len(curve.runs) == 1 for curve in result.curves)
    assert result.curves[0].label.startswith("learning_rate_of_the_critic_network=0.0, hidden_description=a_description")  # last parts, no seed
    figure = result.figure
    result.save(str(tmp_path / "long.png"))  # lays the figure out, with Agg
    (legend,) = figure.legends
    box, page = legend.get_window_extent(), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert not box.overlaps(figure.axes[0].get_window_extent())  # below the axes, not over the curves
    texts = [text.get_text() for text in legend.get_texts()]
    assert [text.rsplit("_", 1)[-1] for text in texts] == [f"{index} (n=1)" for index in range(6)]  # what differs is shown
    assert all(len(text) < 140 for text in texts)


def test_non_finite_values_are_dropped_and_runs_without_the_metric_listed(tmp_path, made):
    values = [1.0, float("nan"), 3.0, float("inf"), 5.0]
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "bad"}}) as logger:
        for step, value in enumerate(values):
            logger.write({"reward_mean": value}, step=step, namespace="collector")
    bad, sb3 = load(logger.run_dir), load(made["sb3"][0].path)
    result = plot_runs([bad, sb3], "collector/reward_mean", x_axis="train_iter", group_by=["source"])
    assert result.skipped == {bad.id: "no finite 'collector/reward_mean' against 'train_iter'"}
    result = plot_runs([bad], METRIC)
    np.testing.assert_array_equal(result.curves[0].x, [0, 2, 4])
    np.testing.assert_array_equal(result.curves[0].mean, [1.0, 3.0, 5.0])
    assert np.isnan(result.curves[0].lower).all()  # one run: no band
    with pytest.raises(PlotError, match="'collector/no_such'.*collector/reward_mean"):
        plot_runs([bad], "collector/no_such")


def rltrack_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrack.cli", *args], check=False, capture_output=True, text=True, timeout=120)


def test_cli_plot_selects_runs_by_id_pattern_and_writes_the_png(made, tmp_path):
    root = made["root"][0].path
    out = tmp_path / "cli" / "reward.png"
    done = rltrack_cli(
        "plot", "--root", str(root), "--metric", METRIC, "--x", "env_steps", "--group-by", "lr", "--size", "640x480",
        f"^{TASK}/.* lr=0\\.003", str(made["rltrack"][0].path), "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["lr=0.001: 1 run(s), 20 points", f"lr=0.003: 4 run(s), {len(expected_band(made['rltrack'][3:]))} points", str(out)]
    image = Image.open(out)
    assert image.format == "PNG" and image.size == (640, 480)
    assert colour_pixels(out, "C0") > 200 and colour_pixels(out, "C1") > 200


def test_cli_plot_errors_name_the_problem(made, tmp_path, capsys):
    root = str(made["root"][0].path)
    out = str(tmp_path / "x.png")
    assert main(["plot", "--root", root, "--metric", "collector/no_such", TASK, "-o", out]) == 2
    stderr = capsys.readouterr().err
    assert "'collector/no_such'" in stderr and "collector/reward_mean" in stderr
    assert main(["plot", "--root", root, "--metric", METRIC, "--size", "big", TASK, "-o", out]) == 2
    stderr = capsys.readouterr().err
    assert "'big'" in stderr and "--size 960x600" in stderr
    assert main(["plot", "--root", root, "--metric", METRIC, "[", "-o", out]) == 2
    stderr = capsys.readouterr().err
    assert "'['" in stderr and "regular expression" in stderr
    assert main(["plot", "--root", root, "--metric", METRIC, "--smooth", "0", TASK, "-o", out]) == 2
    assert "--smooth 1" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(SystemExit) as help_exit:
        main(["plot", "--help"])
    assert help_exit.value.code == 0 and "--group-by" in capsys.readouterr().out


def test_one_runs_metric_and_timing_figures_hold_its_values(made):
    written = made["rltrack"][0]
    run = load(written.path)
    figure = run.plot_metrics()
    by_title = {axes.get_title(): axes for axes in figure.axes}
    assert set(by_title) == {METRIC, "learner/total_loss"}
    x, y = by_title[METRIC].get_lines()[0].get_data()
    np.testing.assert_array_equal(x, written.x)
    np.testing.assert_allclose(y, written.y)

    durations = [e.data["train"] for e in read_journal(written.path) if e.kind == "timing"]
    bars = run.plot_timelog().axes[0].patches
    assert len(durations) == len(written.x) and len(bars) == 1
    assert bars[0].get_width() == pytest.approx(sum(durations))


def test_a_legend_of_many_groups_grows_the_figure_and_shows_floats_readably(tmp_path):
    """30 groups (learning rates 0.001 * i: 0.009000000000000001 and the like) overflowed
    the figure's top over the axes; the figure now grows downwards for the legend's rows."""
    run_dirs = []
    for index in range(30):
        config = {"run": {"root": str(tmp_path), "name": f"lr{index}", "task": "many"}, "backends": {"use": ["memory"]}}
        with rltrack.make_logger(config) as logger:
            logger.log_hparams({"learning_rate": 0.001 * index, "seed": 0})
            for step in range(3):
                logger.write({"reward_mean": step * index}, step=step, namespace="collector")
        run_dirs.append(logger.run_dir)
    result = plot_runs([load(path) for path in run_dirs], METRIC, size=(960, 600))
    result.save(str(tmp_path / "many.png"))
    figure = result.figure
    (legend,) = figure.legends
    box, page = legend.get_window_extent(), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
    assert not box.overlaps(figure.axes[0].get_window_extent())
    assert figure.axes[0].get_window_extent().height >= 300  # the curves keep their room
    assert Image.open(tmp_path / "many.png").size[1] == round(page.height) > 600  # the saved file is the grown figure
    texts = [text.get_text() for text in legend.get_texts()]
    assert "learning_rate=0.009 (n=1)" in texts and not [text for text in texts if "0000000" in text], texts
