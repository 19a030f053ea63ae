"""The analysis refuses what it cannot mean, naming what exists (issue 44, item 5).

The runs are the ones a new user tried: two seeds of one learning rate and one of
another, written with the plain API, returns within 0..85 on `env_steps`. A typo in
`--group-by`, `--columns` or `--x` is an error listing what the runs have; `plot`
keeps its band inside the runs' range and labels the axis it uses; every
subcommand's `--help` has a description and an example.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import rltrack
from rltrack.cli.entry import main
from rltrack.cli.examples import EXAMPLES
from rltrack.runs import load
from rltrack.runs.plot import plot_runs

METRIC = "collector/reward_mean"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tried")
    rng = np.random.default_rng(5)
    for lr, seed in ((0.001, 0), (0.001, 1), (0.01, 0)):
        config = {"run": {"root": str(root), "name": f"lr{lr}_s{seed}", "task": "tried", "tracked": ["lr", "seed"]}, "backends": {"use": ["local"]}}
        with rltrack.make_logger(config) as logger:
            logger.log_hparams({"lr": lr, "seed": seed})
            for i in range(12):
                value = float(np.clip(i * 7 + rng.normal(scale=(1 + seed) * 15), 0, 85))
                logger.write({"reward_mean": value}, step={"env_steps": 500 * i, "train_iter": i}, namespace="collector")
                logger.dump()
    return root


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_an_unknown_group_by_key_lists_the_keys_the_runs_have(root, capsys, tmp_path):
    for command in (["plot", "--metric", METRIC, "tried", "-o", str(tmp_path / "p.png")], ["compare", "--metric", METRIC]):
        message = refused(capsys, [*command, "--root", str(root), "--group-by", "lrr"])
        assert "no run has the grouping key(s) 'lrr'" in message and re.search(r"the runs have: .*\blr\b.*\bseed\b", message), message
    assert not (tmp_path / "p.png").exists()


def test_an_unknown_column_lists_the_columns_the_runs_have(root, capsys):
    message = refused(capsys, ["runs", "ls", "--root", str(root), "--columns", "collector/reward_maen"])
    assert "no run has the column(s) 'collector/reward_maen'" in message and "collector/reward_mean" in message and "lr" in message
    assert main(["runs", "ls", "--root", str(root), "--columns", "lr,collector/reward_mean"]) == 0


def test_an_unknown_x_axis_lists_the_axes_the_runs_have(root, capsys, tmp_path):
    for command in (["plot", "--metric", METRIC, "tried", "-o", str(tmp_path / "p.png")], ["compare", "--metric", METRIC]):
        message = refused(capsys, [*command, "--root", str(root), "--x", "envsteps"])
        assert "no run has the x axis 'envsteps'; the runs have: env_steps, train_iter, time" in message, message


def test_plot_keeps_its_band_within_the_runs_and_names_the_axis_it_uses(root):
    runs = [load(path) for path in sorted(root.iterdir()) if (path / "meta.json").is_file()]
    result = plot_runs(runs, METRIC, group_by=["lr"])
    axes = result.figure.axes[0]
    values = np.concatenate([y for curve in result.curves for _, y in curve.series])
    low, high = axes.get_ylim()
    pad = (values.max() - values.min()) * 0.05
    assert (low, high) == pytest.approx((values.min() - pad, values.max() + pad))
    widest = min(float(np.nanmin(curve.lower)) for curve in result.curves if len(curve.runs) > 1)
    assert widest < low  # two seeds: t(0.975, 1) = 12.7, the band reaches far below the runs and is cut
    assert axes.get_xlabel() == "env_steps (environment steps)"
    assert plot_runs(runs, METRIC, x_axis="train_iter").figure.axes[0].get_xlabel() == "train_iter (training iterations)"


def test_every_subcommands_help_has_a_description_and_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.search(r"\{([a-z,]+)\}", capsys.readouterr().out)
    assert listed is not None
    assert set(listed[1].split(",")) == {name for name in EXAMPLES if " " not in name}
    for name, example in EXAMPLES.items():
        with pytest.raises(SystemExit):
            main([*name.split(), "--help"])
        text = capsys.readouterr().out
        before_options = text.split("\n\n")[1]
        assert not before_options.startswith(("positional arguments", "options")), f"{name}: no description"
        assert text.rstrip().endswith(f"example:\n  {example}"), name
        assert example.startswith(f"rltrack {name}")
