"""`rltrack runs ls/show/plot/report` over folders of event files written without rltrack,
every foreign run addressed by its folder under the root as well as by its id, and
`rltrack import tensorboard` making them run directories that `rltrack sync` delivers
to MLflow, W&B, trackio and Neptune exactly once.

The folders are written by the real writers the frameworks use: torch's
`SummaryWriter` making the calls CleanRL's scripts make (its episodic return
a one-element array, `add_text("hyperparameters", ...)`), tensorboardX's
`add_scalars` (a sub-directory per tag), a Tianshou-style nested `log/` tree,
and DI-engine's real run (tests/helpers/fixtures) under its experiment name.
What the commands print is compared with what TensorBoard's own
`EventAccumulator` reads from the same files (tests/helpers/tracker_scalars.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
torch_tensorboard = pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter writes the CleanRL-style folder")
tensorboardX = pytest.importorskip("tensorboardX")

import rltrack  # noqa: E402
import rltrack.runs as runs  # noqa: E402
import wandb_reader  # noqa: E402
from rltrack.cli.entry import main  # noqa: E402
from rltrack.frameworks.tensorboard import stored_name  # noqa: E402
from rltrack.runs.readers_tensorboard import translated  # noqa: E402
from reliability_helpers import mlflow_run, neptune_floats, sync_run  # noqa: E402
from tracker_scalars import (  # noqa: E402
    at_iterations,
    event_file_scalars,
    expected_in_trackers,
    mlflow_scalars,
    trackio_scalars,
    wandb_scalars,
)

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


#: Folders as skrl, rsl_rl (Isaac Lab's scripts) and Tianshou's high-level experiments name
#: them (-> the task `runs ls` gives them), with the files they write beside the event
#: files, and a tag each writes: skrl's Agent `<directory>/<%y-%m-%d_%H-%M-%S-%f>_<Agent
#: class>` (`checkpoints/`), Isaac Lab's `logs/rsl_rl/<experiment>/<%Y-%m-%d_%H-%M-%S>`
#: (`model_<it>.pt`, `git/`, `params/`), Tianshou 2's `log/<Builder>_<%Y%m%d-%H%M%S>/exp_seed=<seed>`.
FRAMEWORK_FOLDERS = {
    "runs/torch/CartPole-v1/26-11-27_12-00-00-123456_PPO": ("CartPole-v1_PPO", "Reward / Total reward (mean)", ["checkpoints/agent_300.pt"]),
    "logs/rsl_rl/cartpole/2026-11-27_12-00-00": ("cartpole", "Train/mean_reward", ["model_0.pt", "git/rsl_rl.diff", "params/agent.yaml"]),
    "log/DQNExperiment_20261127-120000/exp_seed=0": ("DQNExperiment", "training/returns_stat/mean", ["policy.pt", "experiment.pkl"]),
    "log/DQNExperiment_20261127-120000/exp_seed=1": ("DQNExperiment", "training/returns_stat/mean", ["policy.pt", "experiment.pkl"]),
}


def write_framework_folder(run_dir: Path, tag: str, files: list[str]) -> None:
    writer = torch_tensorboard.SummaryWriter(str(run_dir))
    for step in (100, 200):
        writer.add_scalar(tag, step / 10, step)
    writer.close()
    for name in files:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(b"")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write_cleanrl_style(root / "cleanrl" / CLEANRL_RUN)
    write_tianshou_style(root / "log" / "CartPole-v1" / "ppo" / "0")
    shutil.copytree(FIXTURES / "dingine_dqn_cartpole", root / "cartpole_dqn_seed0")
    return root


@pytest.fixture
def framework_root(root: Path) -> Path:
    for folder, (_, tag, files) in FRAMEWORK_FOLDERS.items():
        write_framework_folder(root / folder, tag, files)
    return root


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


def test_skrl_rsl_rl_and_tianshou_folders_are_listed_named_by_what_ran_and_addressed_by_their_path(framework_root, capsys) -> None:
    code, out, err = run_cli(capsys, "runs", "ls", "--root", str(framework_root), "--json")
    assert code == 0, err
    found = {row["path"]: row for row in json.loads(out)}
    assert set(FRAMEWORK_FOLDERS) < set(found)  # their checkpoints', git's and params' folders are no runs
    assert len(found) == len(FRAMEWORK_FOLDERS) + 3
    for folder, (task, tag, _) in FRAMEWORK_FOLDERS.items():
        assert (found[folder]["writer"], found[folder]["task"]) == ("tensorboard", task), folder
        assert found[folder]["id"].startswith(f"{task}/")
        code, out, err = run_cli(capsys, "runs", "show", folder, "--root", str(framework_root), "--json")
        assert code == 0, err
        assert json.loads(out)["metrics"][stored_name(tag)]["count"] == 2
    code, out, err = run_cli(capsys, "runs", "ls", "--root", str(framework_root))
    header, _, *rows = out.splitlines()
    assert code == 0 and header.split()[:2] == ["id", "path"]  # the address of a run written without rltrack
    assert sorted(row[header.index("path") :].split()[0] for row in rows) == sorted(found)
    code, out, err = run_cli(capsys, "plot", "--root", str(framework_root), "--metric", "collector/reward_mean", "^DQNExperiment/", "-o",
                             str(framework_root.parent / "seeds.png"))  # fmt: skip
    assert code == 0 and "2 run(s)" in out, err  # the two seeds: one task; Tianshou's `training/returns_stat/mean` has its canonical name


@pytest.mark.parametrize("folder", [f"cleanrl/{CLEANRL_RUN}", "log/CartPole-v1/ppo/0"])
def test_every_scalar_of_the_event_files_is_read_at_its_step(root, folder) -> None:
    """Under their tags as written (`charts/x`), at the writer's step, once."""
    run = runs.load(folder, root=root)
    expected = event_file_scalars(root / folder)
    assert "charts/episodic_return" in expected or "test/returns/std" in expected
    for tag, points in expected.items():
        assert [(s, pytest.approx(v)) for s, v in run.metrics[stored_name(tag)]] == points, tag
    native = {stored_name(tag) for tag in expected}
    assert sum(len(points) for tag, points in run.metrics.items() if tag in native) == sum(map(len, expected.values()))


def test_cleanrl_return_hyperparameters_and_steps(root) -> None:
    """The episodic return (a one-element array) is a scalar at env steps under its tag, with its
    canonical twin (the folder is CleanRL's: `<env>__<script>__<seed>__<time>`); the hyperparameter
    table's values are typed."""
    run = runs.load(f"cleanrl/{CLEANRL_RUN}", root=root)
    assert run.metrics["charts/episodic_return"] == run.metrics["collector/reward_mean"] == CLEANRL_RETURNS
    assert {s.steps.get("env_steps") for s in run.samples if s.key == "episodic_return"} == {s for s, _ in CLEANRL_RETURNS}
    assert run.hparams == {"learning_rate": 0.00025, "num_steps": 128} and isinstance(run.hparams["num_steps"], int)


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
    assert "test/returns/mean" in Path(out.strip()).read_text(encoding="utf-8")  # a folder of no known library: its tags as written


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


# ---- rltrack import tensorboard, then rltrack sync ----------------------------------


def without_run(events: list) -> list[tuple]:
    """The events' contents; hyperparameters have no step of their own (the pipeline puts the run's current one)."""
    return [(e.kind, e.namespace, e.steps if e.kind != "hparams" else None, e.data, e.time, e.source) for e in events]


@pytest.fixture
def imported(root, tmp_path, capsys) -> dict[str, Path]:
    """The three foreign runs imported into a runs root of their own, by the command line."""
    code, out, err = run_cli(capsys, "import", "tensorboard", str(root), "--root", str(tmp_path / "runs"))
    assert code == 0, err
    run_dirs = [Path(line) for line in out.splitlines()]
    return {json.loads((d / "meta.json").read_text())["info"]["tensorboard"]["imported_from"]: d for d in run_dirs}


def test_an_imported_run_holds_the_translations_events_and_importing_again_creates_nothing(root, imported, tmp_path, capsys) -> None:
    folders = {f"cleanrl/{CLEANRL_RUN}": root / "cleanrl" / CLEANRL_RUN, "log/CartPole-v1/ppo/0": root / "log/CartPole-v1/ppo/0",
               "cartpole_dqn_seed0": root / "cartpole_dqn_seed0" / "log" / "serial"}  # fmt: skip
    assert set(imported) == {str(folder.resolve()) for folder in folders.values()}
    for folder in folders.values():
        run_dir = imported[str(folder.resolve())]
        journal = [e for e in rltrack.read_journal(run_dir)]
        assert without_run(journal) == without_run(list(translated(folder)))  # the events `attach` gives a live writer
    cleanrl = imported[str(folders[f"cleanrl/{CLEANRL_RUN}"].resolve())]
    cleanrl_meta = json.loads((cleanrl / "meta.json").read_text())
    assert cleanrl.name == CLEANRL_RUN and cleanrl_meta["status"] == "finished"
    assert cleanrl_meta["task"] == "CartPole-v1__ppo"  # the task `runs ls` gives the folder: the experiment in the trackers
    dingine = json.loads((imported[str(folders["cartpole_dqn_seed0"].resolve())] / "meta.json").read_text())
    assert dingine["status"] == runs.load("cartpole_dqn_seed0", root=root).status
    assert dingine["task"] == "cartpole_dqn"
    code, out, err = run_cli(capsys, "import", "tensorboard", str(root), "--root", str(tmp_path / "runs"))
    assert code == 0 and out == "" and err.count("already imported") == 3
    code, _, err = run_cli(capsys, "import", "tensorboard", str(tmp_path / "runs" / CLEANRL_RUN / "ckpt"), "--root", str(tmp_path / "x"))
    assert code == 2 and "no TensorBoard event files" in err


@pytest.mark.slow  # a wandb-core per sync, Neptune's client: about 40 s
def test_imported_runs_sync_into_every_tracker_exactly_once(root, imported, tmp_path) -> None:
    config = tmp_path / "sync.toml"
    config.write_text(
        f'[backends.mlflow]\ntracking_uri = "sqlite:///{tmp_path / "mlflow.db"}"\nexperiment = "imported"\n'
        f'[backends.trackio]\nproject = "imported"\ndir = "{tmp_path / "trackio"}"\n'
    )
    home = tmp_path / "home"
    home.mkdir()
    for folder in (root / "cleanrl" / CLEANRL_RUN, root / "cartpole_dqn_seed0" / "log" / "serial"):
        run_dir = imported[str(folder.resolve())]
        done = sync_run(run_dir, home, "--to", "mlflow", "trackio", "wandb", "neptune", "--config", str(config))
        assert done.returncode == 0, done.stderr
        library = "ding" if folder.parts[-2:] == ("log", "serial") else "cleanrl"  # each folder as its library writes it
        expected = expected_in_trackers(event_file_scalars(folder), library)
        assert ("collector/reward_mean" in expected) and ("charts/episodic_return" in expected) == (library == "cleanrl")
        stores = {
            "mlflow": mlflow_scalars(run_dir),
            "wandb": wandb_scalars(run_dir, "env_steps", "train_iter"),
            "neptune": {name: sorted(neptune_floats(run_dir, name)) for name in expected},
        }
        trackio = trackio_scalars(tmp_path / "trackio", "imported")
        for name, points in expected.items():
            for tracker, held in stores.items():
                assert held[name] == points, (tracker, name)
            assert sorted(p for p in trackio[name] if p in points) == points  # both runs share the project's rows
        if folder.parts[-2:] == ("log", "serial"):  # DI-engine: one value with both axes
            by_iteration = wandb_scalars(run_dir, "train_iter")
            for name, points in at_iterations(event_file_scalars(folder)).items():
                assert by_iteration[name] == points, name
                assert sorted(v for _, v in stores["mlflow"][name]) == sorted(v for _, v in points), name
        else:  # CleanRL's hyperparameters, typed in W&B's config, as MLflow params
            (wandb_file,) = wandb_reader.run_files(run_dir)
            assert {k: v for k, v in wandb_reader.config(wandb_file).items() if k != "_wandb"} == {"learning_rate": 0.00025, "num_steps": 128}
            client, run_id = mlflow_run(run_dir)
            assert client.get_run(run_id).data.params == {"learning_rate": "0.00025", "num_steps": "128"}
        before = (mlflow_scalars(run_dir), [p.stat().st_size for p in wandb_reader.run_files(run_dir)])
        again = sync_run(run_dir, home, "--to", "mlflow", "trackio", "wandb", "neptune", "--config", str(config))
        assert again.returncode == 0, again.stderr
        assert (mlflow_scalars(run_dir), [p.stat().st_size for p in wandb_reader.run_files(run_dir)]) == before
    assert trackio_scalars(tmp_path / "trackio", "imported") == trackio  # the second syncs sent nothing
