"""`rltrack runs ls/show/plot/report` over folders of event files written without rltrack,
and every foreign run addressed by its folder under the root as well as by its id.

The folders are written by the real writers the frameworks use: torch's
`SummaryWriter` making the calls CleanRL's scripts make (its episodic return
a one-element array, `add_text("hyperparameters", ...)`), tensorboardX's
`add_scalars` (a sub-directory per tag), a Tianshou-style nested `log/` tree,
and DI-engine's real run (tests/helpers/fixtures) under its experiment name.
What the commands print is compared with what TensorBoard's own
`EventAccumulator` reads from the same files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
torch_tensorboard = pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter writes the CleanRL-style folder")
tensorboardX = pytest.importorskip("tensorboardX")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.util.tensor_util import make_ndarray  # noqa: E402

import rltrack.runs as runs  # noqa: E402
from rltrack.cli.entry import main  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "helpers" / "fixtures"
CLEANRL_RUN = "CartPole-v1__ppo__1__1764244800"
CLEANRL_RETURNS = [(128, 12.0), (256, 21.0), (384, 9.0), (512, 40.0)]


def write_cleanrl_style(run_dir: Path) -> None:
    """The writer calls of CleanRL's ppo.py (gymnasium 0.29's vector env gives `info["episode"]["r"]` as a 1-element array)."""
    writer = torch_tensorboard.SummaryWriter(str(run_dir))
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|learning_rate|0.00025|\n|num_steps|128|")
    for step, episodic_return in CLEANRL_RETURNS:
        writer.add_scalar("charts/episodic_return", np.array([episodic_return], dtype=np.float32), step)
        writer.add_scalar("losses/value_loss", 1.0 / step, step)
    writer.close()


def write_tianshou_style(run_dir: Path) -> None:
    """A nested `log/<task>/<algo>/<seed>` folder with an `add_scalars` call (one sub-writer per tag)."""
    writer = tensorboardX.SummaryWriter(str(run_dir))
    for step in (1000, 2000, 3000):
        writer.add_scalar("train/returns_stat/mean", step / 100.0, step)
        writer.add_scalars("test/returns", {"mean": step / 50.0, "std": 1.5}, step)
    writer.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write_cleanrl_style(root / "cleanrl" / CLEANRL_RUN)
    write_tianshou_style(root / "log" / "CartPole-v1" / "ppo" / "0")
    shutil.copytree(FIXTURES / "dingine_dqn_cartpole", root / "cartpole_dqn_seed0")
    return root


def accumulated(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the folder and its `add_scalars` sub-folders, as TensorBoard reads them."""
    series: dict[str, list[tuple[int, float]]] = {}
    for folder in [run_dir, *sorted({p.parent for p in run_dir.rglob("events.out.tfevents.*")} - {run_dir})]:
        accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:  # add_scalars: tensorboardX's folder <run>/<main tag>/<tag>
            series[tag if folder == run_dir else f"{tag}/{folder.name}"] = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["tensors"]:  # torch's scalars of a one-element array
            if tag != "hyperparameters/text_summary":
                series[tag] = [(e.step, float(make_ndarray(e.tensor_proto).reshape(-1)[0])) for e in accumulator.Tensors(tag)]
    return series


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ls_lists_every_folder_of_event_files_with_its_writer(root, capsys) -> None:
    code, out, err = run_cli(capsys, "runs", "ls", "--root", str(root), "--json")
    assert code == 0, err
    found = {row["path"]: row for row in json.loads(out)}
    assert set(found) == {f"cleanrl/{CLEANRL_RUN}", "log/CartPole-v1/ppo/0", "cartpole_dqn_seed0"}
    assert found[f"cleanrl/{CLEANRL_RUN}"]["writer"] == "tensorboard"
    assert found[f"cleanrl/{CLEANRL_RUN}"]["task"] == "CartPole-v1__ppo"  # CleanRL's seed and time are not the task
    assert found["log/CartPole-v1/ppo/0"]["writer"] == "tensorboard"
    assert found["cartpole_dqn_seed0"]["writer"] == "di-engine"


@pytest.mark.parametrize("folder", [f"cleanrl/{CLEANRL_RUN}", "log/CartPole-v1/ppo/0"])
def test_every_scalar_of_the_event_files_is_read_at_its_step(root, folder) -> None:
    run = runs.load(folder, root=root)
    expected = accumulated(root / folder)
    assert "charts/episodic_return" in expected or "test/returns/std" in expected
    for tag, points in expected.items():
        assert [(s, pytest.approx(v)) for s, v in run.metrics[tag]] == points, tag
    native = {tag for tag in run.metrics if tag in expected}
    assert native == set(expected)


def test_the_cleanrl_episodic_return_is_a_scalar_not_dropped(root) -> None:
    run = runs.load(f"cleanrl/{CLEANRL_RUN}", root=root)
    assert run.metrics["charts/episodic_return"] == CLEANRL_RETURNS


def test_show_and_export_address_foreign_runs_by_their_folder(root, capsys, tmp_path) -> None:
    for folder in ("cartpole_dqn_seed0", f"cleanrl/{CLEANRL_RUN}", f"cleanrl/{CLEANRL_RUN}/"):
        code, out, err = run_cli(capsys, "runs", "show", folder, "--root", str(root), "--json")
        assert code == 0, err
        shown = json.loads(out)
        assert Path(shown["path"]).resolve() == (root / folder).resolve()
    run = runs.load("cartpole_dqn_seed0", root=root)
    assert runs.load(run.id, root=root).path == run.path  # the id still works
    code, out, err = run_cli(capsys, "export", "log/CartPole-v1/ppo/0", "--root", str(root), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert "test/returns/mean" in Path(out.strip()).read_text(encoding="utf-8")


def test_a_folder_that_is_no_run_names_folders_in_the_error(root, capsys) -> None:
    code, _, err = run_cli(capsys, "runs", "show", "cleanrl", "--root", str(root))
    assert code != 0 and "'cleanrl'" in err and "folder" in err


def test_plot_and_report_select_runs_by_a_pattern_over_folder_names(root, tmp_path, capsys) -> None:
    png = tmp_path / "di.png"
    code, out, err = run_cli(capsys, "plot", "--root", str(root), "--metric", "collector/reward_mean", "cartpole_dqn", "-o", str(png))
    assert code == 0, err
    assert out.splitlines()[-1] == str(png) and "1 run(s)" in out
    code, out, err = run_cli(capsys, "plot", "--root", str(root), "--metric", "charts/episodic_return", "^cleanrl/", "-o", str(png))
    assert code == 0, err
    assert f"{len(CLEANRL_RETURNS)} points" in out
    page = tmp_path / "report.html"
    code, _, err = run_cli(capsys, "report", "--root", str(root), "^log/", "-o", str(page))
    assert code == 0, err
    assert "test/returns/mean" in page.read_text(encoding="utf-8")


def test_a_torn_last_record_is_left_out_and_the_rest_read(root) -> None:
    folder = root / "cleanrl" / CLEANRL_RUN
    events = next(folder.glob("events.out.tfevents.*"))
    events.write_bytes(events.read_bytes()[:-7])
    run = runs.load(f"cleanrl/{CLEANRL_RUN}", root=root)
    assert run.metrics["charts/episodic_return"] == CLEANRL_RETURNS
    assert run.metrics["losses/value_loss"] == [(s, pytest.approx(1.0 / s)) for s, _ in CLEANRL_RETURNS[:-1]]
