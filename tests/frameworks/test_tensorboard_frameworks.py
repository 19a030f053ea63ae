

ATTACHED = """
\"\"\"A user's two lines: attach rltrack to every TensorBoard writer, then run CleanRL's script as it is.\"\"\"
import runpy, sys
import rltrack
from rltrack.adapters.tensorboard import attach
attach(rltrack.make_logger(sys.argv[1]))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_cleanrl_with_attach_in_the_users_code(tmp_path: Path) -> None:
    case = CleanRLDQN()
    for module in case.modules:
        pytest.importorskip(module, reason=f"{case.name} needs {module} (installed in the oldest environment, see the Makefile)")
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path)
    done = train(case, tmp_path / "attached", home, [PYTHON, "-c", ATTACHED, str(config)])
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    assert sync_run(run_dir, home).returncode == 0
    assert meta(run_dir)["status"] == "finished"
    expected = expected_in_trackers(event_file_scalars(case.event_folder(tmp_path / "attached")))
    for name, points in expected.items():
        assert mlflow_scalars(run_dir).get(name) == points, name
        assert wandb_scalars(run_dir, "env_steps").get(name) == points, name


def test_a_cleanrl_script_that_raises_ends_its_run_failed(tmp_path: Path) -> None:
    """dqn.py with an environment gymnasium does not know: the writer has written the
    hyperparameters when `gym.make` raises; the launcher exits with the script's code."""
    case = CleanRLDQN()
    for module in case.modules:
        pytest.importorskip(module, reason=f"{case.name} needs {module} (installed in the oldest environment, see the Makefile)")
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path)
    command = [PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--", PYTHON, *case.command(seed=1), "--env-id", "NoSuchEnv-v0"]
    (tmp_path / "work").mkdir()
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(home), timeout=600, cwd=tmp_path / "work", check=False)
    assert done.returncode == 1 and "NoSuchEnv" in done.stderr, done.stderr[-3000:]
    (run_dir,) = [p.parent for p in (tmp_path / "rl").glob("*/meta.json")]
    assert meta(run_dir)["status"] == "failed"
    client, run_id = mlflow_run(run_dir) if sync_run(run_dir, home).returncode == 0 else (None, None)
    assert client is not None and client.get_run(run_id).info.status == "FAILED"
    assert client.get_run(run_id).data.params["env_id"] == "NoSuchEnv-v0"
