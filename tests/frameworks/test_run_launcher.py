"""`rltrack run -- python script.py`: a script's TensorBoard writers into every tracker, unchanged.

The scripts here imitate CleanRL's logging calls (a `SummaryWriter` in
`runs/<run_name>`, the hyperparameter table as text, one-element arrays for
returns, `charts/` and `losses/` against `global_step`); the real CleanRL
runs are tests of their own. They run as a user runs them, through
`python -m rltrack.cli run` in a child process; the runs are read back from
their run directories, MLflow's SQLite store (MlflowClient), W&B's offline
`.wandb` file and trackio's store, the event files with TensorBoard's
`EventAccumulator` beside the same script's run without rltrack.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.utils.tensorboard", reason="torch's SummaryWriter (CleanRL's writer)")
import trackio_reader  # noqa: E402
import wandb_reader  # noqa: E402
from reliability_helpers import PYTHON, child_env, meta, sync_run  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from waiting import wait_until  # noqa: E402

RUN_NAME = "CartPole-v1__ppo_like__1__1700000000"
CLEANRL_LIKE = f'''
"""Imitates CleanRL's ppo.py logging calls, with fixed wall times."""
import sys
import numpy as np
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter("runs/{RUN_NAME}")
hparams = {{"num_steps": 128, "anneal_lr": True, "learning_rate": 0.00025, "env_id": "CartPole-v1"}}
writer.add_text("hyperparameters", "|param|value|\\n|-|-|\\n%s" % "\\n".join(f"|{{k}}|{{v}}|" for k, v in hparams.items()), walltime=1000.0)
for update in range(1, 6):
    global_step = update * 128
    writer.add_scalar("charts/episodic_return", np.array([3.0 * update]), global_step, walltime=1000.0 + update)
    writer.add_scalar("charts/learning_rate", 0.00025, global_step, walltime=1000.2 + update)
    writer.add_scalar("losses/value_loss", 1.0 / update, global_step, walltime=1000.4 + update)
writer.close()
if len(sys.argv) > 1:
    sys.exit(int(sys.argv[1]))
'''
STEPS = [128 * u for u in range(1, 6)]
RETURNS = [3.0 * u for u in range(1, 6)]


def launch(
    home: Path, script: str, *args: str, config: Path | None = None, name: str | None = None, env: dict[str, str] | None = None, path: str = "script.py"
) -> subprocess.CompletedProcess[str]:
    """`script` saved as `path` under `home` (a CleanRL script lies in a `cleanrl` folder), run under `rltrack run`."""
    (home / path).parent.mkdir(parents=True, exist_ok=True)
    (home / path).write_text(script)
    options = [*(["--config", str(config)] if config else []), *(["--name", name] if name else [])]
    environment = {**child_env(home), **(env or {})}
    environment.pop("PYTHONSAFEPATH", None)  # CI's guard that rltrack comes from the wheel; a user's script imports its own folder's modules
    return subprocess.run(
        [PYTHON, "-m", "rltrack.cli", "run", *options, "--", PYTHON, path, *args],
        capture_output=True, text=True, env=environment, timeout=600, cwd=home,
    )  # fmt: skip


def write_config(home: Path, backends: list[str]) -> Path:
    config = home / "rltrack.toml"
    config.write_text(f'[run]\nroot = "{home / "rl"}"\n\n[backends]\nuse = {json.dumps(backends)}\n')
    return config


def run_dirs(home: Path) -> list[Path]:
    return sorted(p.parent for p in (home / "rl").glob("*/meta.json"))


def event_files(logdir: Path) -> dict[str, Any]:
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    return {
        "scalars": {t: [(s.wall_time, s.step, s.value) for s in accumulator.Scalars(t)] for t in tags["scalars"]},
        "tensors": {t: [(s.wall_time, s.step, s.tensor_proto.SerializeToString()) for s in accumulator.Tensors(t)] for t in tags["tensors"]},
    }


def ended(run_dir: Path) -> str:
    """The run's final status, once the agent has written it."""
    return str(wait_until(lambda: meta(run_dir).get("status") not in (None, "running") and meta(run_dir)["status"], 600, f"{run_dir} to end"))


@pytest.mark.slow
def test_a_cleanrl_shaped_script_reaches_every_tracker_and_its_files_stay_unchanged(tmp_path: Path) -> None:
    plain, home = tmp_path / "plain", tmp_path / "home"
    plain.mkdir()
    home.mkdir()
    (plain / "script.py").write_text(CLEANRL_LIKE)
    done = subprocess.run([PYTHON, "script.py"], capture_output=True, text=True, env=child_env(plain), timeout=300, cwd=plain)
    assert done.returncode == 0, done.stderr
    done = launch(home, CLEANRL_LIKE, config=write_config(home, ["local", "mlflow", "wandb", "trackio"]), path="cleanrl/ppo_like.py")  # as cloned
    assert done.returncode == 0, done.stderr
    assert event_files(home / "runs" / RUN_NAME) == event_files(plain / "runs" / RUN_NAME)
    (run_dir,) = run_dirs(home)
    assert run_dir.name == RUN_NAME  # named after the writer's log directory
    # what the agent has not delivered yet: `rltrack sync` until it says everything is there (on a saturated
    # machine the agent may still hold a tracker's lock, or W&B's core may not have finished: try again)
    wait_until(lambda: sync_run(run_dir, home).returncode == 0, 900, f"rltrack sync {run_dir} to deliver everything")
    assert ended(run_dir) == "finished"
    info = meta(run_dir)["info"]
    assert info["command"] == [PYTHON, "cleanrl/ppo_like.py"] and info["logdir"] == f"runs/{RUN_NAME}"
    # MLflow: every value once under its tag, its canonical twin beside it, at its env step; the hyperparameters as parameters
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{home / 'rl' / 'mlflow.db'}")
    (found,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert found.info.run_name == RUN_NAME and found.info.status == "FINISHED"
    for key in ("charts/episodic_return", "collector/reward_mean"):
        assert sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, key)) == list(zip(STEPS, RETURNS))
    assert [m.step for m in client.get_metric_history(found.info.run_id, "learner/value_loss_avg")] == STEPS
    assert {k: found.data.params[k] for k in ("num_steps", "anneal_lr", "learning_rate", "env_id")} == {
        "num_steps": "128", "anneal_lr": "True", "learning_rate": "0.00025", "env_id": "CartPole-v1",
    }  # fmt: skip
    # W&B: the config keeps the types; each return once, with its env step
    (wandb_file,) = wandb_reader.run_files(run_dir)
    config = wandb_reader.config(wandb_file)
    assert (config["num_steps"], config["anneal_lr"], config["learning_rate"]) == (128, True, 0.00025)
    assert type(config["num_steps"]) is int and type(config["anneal_lr"]) is bool
    rows = [row for row in wandb_reader.history(wandb_file) if "charts/episodic_return" in row]
    assert [(row["env_steps"], row["charts/episodic_return"]) for row in rows] == list(zip(STEPS, RETURNS))
    # trackio
    (project,) = trackio_reader.projects(home / "rl" / "trackio")
    logs = trackio_reader.store(home / "rl" / "trackio", project)["logs"][RUN_NAME]
    assert [row["charts/episodic_return"] for row in logs if "charts/episodic_return" in row] == RETURNS


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tail", "code", "status"),
    [
        ("sys.exit(3)", 3, "failed"),
        ("raise ValueError('diverged')", 1, "failed"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL, "crashed"),
    ],
)
def test_the_run_status_and_the_exit_code_follow_the_script(tail: str, code: int, status: str, tmp_path: Path) -> None:
    done = launch(tmp_path, CLEANRL_LIKE.replace("if len(sys.argv) > 1:", f"{tail}\nif len(sys.argv) > 1:"), config=write_config(tmp_path, ["local"]))
    assert done.returncode == code, done.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert ended(run_dir) == status
    journal = [json.loads(line) for path in run_dir.glob("journal*.jsonl") for line in path.read_text().splitlines()]
    returns = [e["data"]["episodic_return"] for e in journal if e.get("namespace") == "charts"]  # a script of no known library: as written
    if status == "crashed":  # SIGKILL: what the pipeline thread had not journaled yet (< 0.5 s) is lost
        assert returns == RETURNS[: len(returns)]
    else:
        assert returns == RETURNS


@pytest.mark.slow
def test_sigterm_is_forwarded_and_the_run_is_killed(tmp_path: Path) -> None:
    script = CLEANRL_LIKE.replace("writer.close()", "writer.flush()\nprint('READY', flush=True)\nimport time\ntime.sleep(600)")
    (tmp_path / "script.py").write_text(script)
    config = write_config(tmp_path, ["local"])
    launcher = subprocess.Popen(
        [PYTHON, "-m", "rltrack.cli", "run", "--config", str(config), "--", PYTHON, "script.py"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    try:
        assert launcher.stdout is not None and launcher.stdout.readline().strip() == "READY"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=300) == 128 + signal.SIGTERM
    finally:
        if launcher.poll() is None:
            launcher.kill()
    (run_dir,) = run_dirs(tmp_path)
    assert ended(run_dir) == "killed"


@pytest.mark.slow
def test_child_processes_have_runs_of_their_own_and_the_users_sitecustomize_still_runs(tmp_path: Path) -> None:
    users_site = tmp_path / "users_site"
    users_site.mkdir()
    (users_site / "sitecustomize.py").write_text("import os\nopen(os.path.join(os.getcwd(), 'site_%d' % os.getpid()), 'w').close()\n")
    script = textwrap.dedent(
        '''
        import multiprocessing, subprocess, sys
        from torch.utils.tensorboard import SummaryWriter

        def work(name):
            writer = SummaryWriter(f"runs/{name}")
            writer.add_scalar("charts/SPS", 10.0, 1)
            writer.close()

        if __name__ == "__main__":
            main = SummaryWriter("runs/parent")
            main.add_scalar("charts/SPS", 1.0, 1)
            second = SummaryWriter("runs/parent/eval")  # another writer of the same process: the same run
            second.add_scalar("charts/episodic_return", 2.0, 1)
            second.close()
            process = multiprocessing.get_context("spawn").Process(target=work, args=("spawned",))
            process.start()
            process.join()
            subprocess.run([sys.executable, "-c", "import script; script.work('sub')"], check=True)
            subprocess.run([sys.executable, "-c", "print('writes nothing')"], check=True)
            main.close()
        '''
    )
    done = launch(tmp_path, script, config=write_config(tmp_path, ["local"]), env={"PYTHONPATH": f"{users_site}{os.pathsep}{child_env(tmp_path)['PYTHONPATH']}"})
    assert done.returncode == 0, done.stderr
    found = {d.name: meta(d) for d in run_dirs(tmp_path)}
    assert sorted(found) == ["parent", "spawned", "sub"]  # one run per process that writes; none for the one that does not
    assert len({m["info"]["launch"] for m in found.values()}) == 1
    assert found["spawned"]["info"]["parent_pid"] == found["parent"]["info"]["pid"]
    assert found["sub"]["info"]["parent_pid"] == found["parent"]["info"]["pid"]
    assert all(ended(tmp_path / "rl" / name) == "finished" for name in found)
    journal = [json.loads(line) for path in (tmp_path / "rl" / "parent").glob("journal*.jsonl") for line in path.read_text().splitlines()]
    assert {(e.get("namespace"), json.dumps(e.get("data"))) for e in journal if e.get("kind") == "scalars"} == {
        ("charts", json.dumps({"SPS": 1.0})), ("eval", json.dumps({"charts/episodic_return": 2.0})),
    }  # fmt: skip
    assert len(list(tmp_path.glob("site_*"))) >= 4  # the user's sitecustomize ran in every Python process


PROCESSES = textwrap.dedent(
    '''
    """A parent writing TensorBoard before and after three children that write their own:
    a `multiprocessing` fork child (Linux's default in Python 3.11), a spawn child, a subprocess."""
    import multiprocessing, subprocess, sys
    from torch.utils.tensorboard import SummaryWriter

    def work(name):
        writer = SummaryWriter(f"runs/{name}")
        for step in (1, 2, 3):
            writer.add_scalar("charts/SPS", 10.0 * step, step)
        writer.close()

    if __name__ == "__main__":
        main = SummaryWriter("runs/parent")
        main.add_scalar("charts/SPS", 1.0, 1)  # before the fork: the parent's run, its pipeline thread, values in flight
        for context in ("fork", "spawn"):
            child = multiprocessing.get_context(context).Process(target=work, args=(context,))
            child.start()
            child.join()
            assert child.exitcode == 0, (context, child.exitcode)
        subprocess.run([sys.executable, "-c", "import script; script.work('sub')"], check=True)
        main.add_scalar("charts/SPS", 2.0, 2)
        main.close()
    '''
)
CHILD_VALUES = [(1, 10.0), (2, 20.0), (3, 30.0)]


def scalars(run_dir: Path) -> list[tuple[str, str, int, float]]:
    """(namespace, key, primary step, value) of every journaled scalar of the run, all its writers."""
    from rltrack.journal import read_journal

    return [(e.namespace, key, next(iter(e.steps.values())), value) for e in read_journal(run_dir) if e.kind == "scalars" for key, value in e.data.items()]


@pytest.mark.slow
def test_a_forked_child_that_writes_has_a_run_of_its_own_and_nothing_is_lost_or_doubled(tmp_path: Path) -> None:
    """One run per process that writes, forked ones too: the fork copies the parent's hooked
    classes and attachment but no thread; the child opens its own run (its own pipeline thread)
    and the parent's values in flight at the fork stay the parent's alone."""
    done = launch(tmp_path, PROCESSES, config=write_config(tmp_path, ["local"]))
    assert done.returncode == 0, done.stderr
    found = {d.name: meta(d) for d in run_dirs(tmp_path)}
    assert sorted(found) == ["fork", "parent", "spawn", "sub"]
    assert all(ended(tmp_path / "rl" / name) == "finished" for name in found)
    assert found["fork"]["info"]["parent_pid"] == found["parent"]["info"]["pid"] != found["fork"]["info"]["pid"]
    assert [(step, value) for _, key, step, value in scalars(tmp_path / "rl" / "parent") if key == "SPS"] == [(1, 1.0), (2, 2.0)]
    for name in ("fork", "spawn", "sub"):
        assert [(step, value) for _, key, step, value in scalars(tmp_path / "rl" / name) if key == "SPS"] == CHILD_VALUES, name


@pytest.mark.slow
def test_launch_runs_one_makes_every_process_a_writer_of_one_run(tmp_path: Path) -> None:
    """`run.launch_runs = "one"`: one run named before the command starts (the script's name
    here), the first process its `main` writer with its tags routed as usual, each child that
    writes another writer with its values in a namespace named after its log directory; one
    MLflow run holds every value once."""
    config = write_config(tmp_path, ["local", "mlflow"])
    config.write_text(config.read_text().replace("[run]\n", '[run]\nlaunch_runs = "one"\n'))
    done = launch(tmp_path, PROCESSES, config=config)
    assert done.returncode == 0, done.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert run_dir.name == "script"
    workers = {path.stem: json.loads(path.read_text()) for path in (run_dir / "workers").glob("*.json")}
    assert len(workers) == 4 and "main" in workers
    by_namespace: dict[str, list[tuple[int, float]]] = {}
    for namespace, key, step, value in scalars(run_dir):
        if key in ("SPS", "charts/SPS"):
            by_namespace.setdefault(namespace, []).append((step, value))
    assert by_namespace == {"charts": [(1, 1.0), (2, 2.0)], "fork": CHILD_VALUES, "spawn": CHILD_VALUES, "sub": CHILD_VALUES}
    wait_until(lambda: sync_run(run_dir, tmp_path).returncode == 0, 900, f"rltrack sync {run_dir} to deliver everything")
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'rl' / 'mlflow.db'}")
    (found,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = {key: [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, key)] for key in found.data.metrics}
    assert sorted(history["charts/SPS"]) == [(1, 1.0), (2, 2.0)]
    for namespace in ("fork", "spawn", "sub"):
        assert sorted(history[f"{namespace}/charts/SPS"]) == CHILD_VALUES, namespace


def test_launch_runs_one_leaves_no_directory_when_nothing_writes(tmp_path: Path) -> None:
    config = write_config(tmp_path, ["local"])
    config.write_text(config.read_text().replace("[run]\n", '[run]\nlaunch_runs = "one"\n'))
    done = launch(tmp_path, "print('writes nothing')\n", config=config)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "rl").exists() or not any((tmp_path / "rl").iterdir())


def test_the_launcher_says_what_is_wrong(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PYTHON, "-m", "rltrack.cli", "run", *args], capture_output=True, text=True, env=child_env(tmp_path), timeout=120, cwd=tmp_path)

    done = run("--")
    assert done.returncode == 2 and "no command given" in done.stderr
    done = run("--config", "missing.toml", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and "missing.toml" in done.stderr
    (tmp_path / "bad.toml").write_text("[run]\nnames = 'sometimes'\n")
    done = run("--config", "bad.toml", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and "sometimes" in done.stderr
    (tmp_path / "bad.toml").write_text("[run]\nlaunch_runs = 'all'\n")
    done = run("--config", "bad.toml", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and "run.launch_runs = 'all'" in done.stderr and "'per-process', 'one'" in done.stderr
    done = run("--", "no-such-program-here")
    assert done.returncode == 127 and "no-such-program-here" in done.stderr


def test_the_launcher_starts_the_agent_while_a_script_of_its_python_starts(tmp_path: Path) -> None:
    """The command's first writer finds the agent running instead of waiting
    for it to start: the launcher starts it beside the command, when the
    command runs this interpreter. This script writes nothing, so only the
    launcher can have started the agent it waits for (at most 300 s)."""
    script = textwrap.dedent(
        """
        from rltrack.agent.files import agent_dir, agent_running
        from waiting import wait_until
        wait_until(lambda: agent_running(agent_dir()), 300, "the agent the launcher starts")
        print("agent running")
        """
    )
    done = launch(tmp_path, script)
    assert done.returncode == 0 and "agent running" in done.stdout, done.stderr


def test_only_a_command_of_this_python_gets_the_agent_started_beside_it(tmp_path: Path) -> None:
    from rltrack.cli.run_command import runs_this_python

    env = dict(os.environ)
    assert runs_this_python([sys.executable, "train.py"], env)
    assert not runs_this_python(["sh", "-c", "true"], env)
    (tmp_path / "python").symlink_to(os.path.realpath(sys.executable))  # the same binary in another environment's bin
    assert not runs_this_python([str(tmp_path / "python"), "train.py"], env)
