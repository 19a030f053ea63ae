"""The agent as a machine service: it outlives whoever started it (a Ray
trial, a removed working directory), it is replaced and its death is told
when it dies with work left, it works within the descriptor limit, and it
refuses an agent directory another user owns.

Each test has an agent directory of its own; the trackers are real (MLflow
on a SQLite file) or the stand-in `stand_in_tracker.FileTracker`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from reliability_helpers import PYTHON, child_env, mlflow_history, read_run_dir, wandb_files, wandb_history
from stand_in_tracker import received
from waiting import wait_until

import rltrack
from rltrack.agent.files import read_json

TRACKER = "stand_in_tracker:FileTracker"
HELPERS = str(Path(__file__).parents[1] / "helpers")


def kill_agents(directory: Path) -> None:
    """Ends the keepers, then the agents, of `directory` (their command lines name it)."""
    for module in ("rltrack.agent.keeper", "rltrack.agent.process"):
        for process in psutil.process_iter(["cmdline"]):
            if (process.info["cmdline"] or [])[-3:] == ["-m", module, str(directory)]:
                process.kill()


@pytest.fixture
def agents_of_test(tmp_path, monkeypatch):
    directory = tmp_path / "agents"
    monkeypatch.setenv("RLTRACK_AGENT_DIR", str(directory))
    monkeypatch.setenv("RLTRACK_AGENT_IDLE", "5")
    yield directory
    for path in directory.glob("*/agent.lock"):
        kill_agents(path.parent)


def history_length(run_dir: Path, key: str) -> int:
    try:
        return len(mlflow_history(run_dir, key))
    except (OSError, ValueError, KeyError):  # the run not yet made
        return 0


def test_an_agent_started_inside_a_ray_trial_outlives_it_and_delivers_everything(tmp_path, agents_of_test, ray_cluster):
    """Ray kills a worker's children when the worker exits: the agent,
    started by the trial's logger, left the trial's process tree, so the
    3,000 values of a trial closed with `close_timeout = 0` still reach the
    trackers after `tune.run` returned. The stand-in tracker hangs until the
    trial's worker is gone, so that the agent has work left when Ray reaps
    (before: the agent died with the worker, the stand-in never got a value)."""
    from ray import tune

    hold = tmp_path / "hold"
    hold.touch()

    def trainable(config):
        import os
        import sys

        sys.path.insert(0, config["helpers"])  # stand_in_tracker, for the agent too (the registration carries sys.path)
        import rltrack

        os.environ["RLTRACK_AGENT_DIR"] = config["agents"]
        os.environ["RLTRACK_AGENT_IDLE"] = "5"
        backends = {"use": ["local", "mlflow", TRACKER], TRACKER: {"hang_while": config["hold"]}}
        with rltrack.make_logger({"run": {"root": config["root"], "name": "trial", "close_timeout": 0}, "backends": backends}) as logger:
            for i in range(3000):
                logger.write({"x": float(i)}, step=i, namespace="collector")
        tune.report({"done": 1, "run_dir": str(logger.run_dir), "pid": os.getpid()})

    config = {"root": str(tmp_path / "runs"), "agents": str(agents_of_test), "hold": str(hold), "helpers": HELPERS}
    analysis = tune.run(trainable, config=config, storage_path=str(tmp_path / "ray_results"), name="outlive", verbose=0)
    [trial] = analysis.trials
    run_dir, trial_pid = Path(trial.last_result["run_dir"]), trial.last_result["pid"]
    [directory] = [path.parent for path in agents_of_test.glob("*/agent.lock")]
    agent = read_json(directory / "agent.json")["pid"]
    wait_until(lambda: not psutil.pid_exists(trial_pid), 60, "the trial's worker to exit")  # Ray kills its children as it does
    time.sleep(1.0)  # Ray reaps right after the exit
    assert psutil.pid_exists(agent), "the agent died with the trial's worker"
    hold.unlink()
    wait_until(lambda: len(received(run_dir)) == 3000, 180, "the stand-in tracker to hold the trial's 3,000 values")
    assert [event.data["x"] for event in received(run_dir)] == [float(i) for i in range(3000)]
    wait_until(lambda: history_length(run_dir, "collector/x") == 3000, 180, "MLflow to hold the trial's 3,000 values")
    assert mlflow_history(run_dir, "collector/x") == [(i, float(i)) for i in range(3000)]
    wait_until(lambda: (run_dir / "progress.csv").is_file() and (run_dir / "progress.csv").read_text().count("\n") == 3001, 60,
             "progress.csv to hold the 3,000 rows")  # fmt: skip
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"
    assert read_json(directory / "agent.json")["pid"] == agent  # the agent the trial started did it all
    assert "died" not in (directory / "agent.log").read_text()


IN_EXP = textwrap.dedent(
    """
    import rltrack
    config = {"run": {"root": "runs", "name": "again", "close_timeout": 120},
              "backends": {"use": ["local", "mlflow", "wandb"], "wandb": {"project": "exp"}}}
    logger = rltrack.make_logger(config)
    for i in range(200):
        logger.write({"x": float(i)}, step=i)
    print("RUN_DIR=" + str(logger.run_dir.resolve()), flush=True)
    print("CLOSED=" + str(logger.close()), flush=True)
    """
)


@pytest.mark.slow
def test_the_agent_does_not_need_its_starters_working_directory(tmp_path, agents_of_test):
    """A script run in `exp/`, then `rm -rf exp; mkdir exp` and the script run
    again while the first agent is still up: both runs reach MLflow and W&B
    (before: the agent kept the removed directory as its own, and both
    trackers failed with FileNotFoundError)."""
    exp = tmp_path / "exp"
    run_dirs = []
    for attempt in range(2):
        shutil.rmtree(exp, ignore_errors=True)
        exp.mkdir()
        env = child_env(tmp_path / "home", RLTRACK_AGENT_DIR=str(agents_of_test), RLTRACK_AGENT_IDLE="60")
        done = subprocess.run([PYTHON, "-c", IN_EXP], capture_output=True, text=True, env=env, timeout=300, cwd=exp)
        assert done.returncode == 0, done.stderr
        assert "CLOSED=True" in done.stdout, done.stderr  # every tracker has everything
        run_dirs.append(read_run_dir(done.stdout.splitlines()))
        assert "Error" not in done.stderr, done.stderr
    [agent] = {path.parent for path in agents_of_test.glob("*/agent.lock")}
    assert (agent / "agent.log").read_text().count("serving") == 1  # one agent served both
    run_dir = run_dirs[1]
    assert mlflow_history(run_dir, "x") == [(i, float(i)) for i in range(200)]
    [wandb_file] = wandb_files(run_dir)
    assert [row["x"] for row in wandb_history(wandb_file)] == [float(i) for i in range(200)]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("foreign", ["base", "key directory"])
def test_an_agent_directory_another_user_owns_is_refused(tmp_path, monkeypatch, foreign):
    """A shared RLTRACK_AGENT_DIR (or the agent directory inside it) that
    another user owns is refused at `make_logger`, naming the owner and what
    to do, and left as it was (before: made 0700 and used, whoever owned it)."""
    base = tmp_path / "shared"
    monkeypatch.setenv("RLTRACK_AGENT_DIR", str(base))
    base.mkdir(mode=0o777)
    os.chmod(base, 0o777)
    other = 4242  # a uid no test runs as
    if foreign == "base":
        os.chown(base, other, other)
        theirs = base
    else:
        theirs = base / agent_dir_name()
        theirs.mkdir(mode=0o755)
        os.chown(theirs, other, other)
    mode = stat.S_IMODE(theirs.stat().st_mode)
    config = {"run": {"root": str(tmp_path / "runs"), "name": "shared"}, "backends": {"use": ["local"]}}
    with pytest.raises(PermissionError, match=rf"{theirs} belongs to uid {other}.*RLTRACK_AGENT_DIR") as refused:
        rltrack.make_logger(config)
    assert "not to you" in str(refused.value)
    assert stat.S_IMODE(theirs.stat().st_mode) == mode and theirs.stat().st_uid == other  # untouched
    assert not (theirs / "runs").exists() if foreign == "key directory" else not any(base.iterdir())
    assert not list(base.rglob("*.json"))  # nothing registered
    assert not (tmp_path / "runs").exists()  # and no run directory left saying `running`


def agent_dir_name() -> str:
    """The name `agent_dir` gives this process's agent directory inside the base (made once, to learn it)."""
    from rltrack.agent.files import agent_dir

    with pytest.MonkeyPatch.context() as patch:
        probe = Path(os.environ["RLTRACK_AGENT_DIR"]).parent / "probe"
        patch.setenv("RLTRACK_AGENT_DIR", str(probe))
        return agent_dir().name


MANY_RUNS = textwrap.dedent(
    """
    import resource, sys
    runs, limit = int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))  # the agent it starts inherits it
    import rltrack
    backends = {"use": ["local", "mlflow"]}
    loggers = [rltrack.make_logger({"run": {"root": sys.argv[1], "name": f"run{i}", "close_timeout": 0}, "backends": backends})
               for i in range(runs)]
    for step in range(20):
        for i, logger in enumerate(loggers):
            logger.write({"x": float(1000 * i + step)}, step=step, namespace="collector")
    for logger in loggers:
        logger.close()
    print("closed", flush=True)
    """
)


@pytest.mark.slow
def test_the_agent_serves_more_runs_than_its_descriptor_limit_holds_at_once(tmp_path, agents_of_test):
    """150 runs open at once (local + MLflow, `close_timeout = 0`) under a
    descriptor limit of 256 (the agent serves 48 writers at once, a third of
    them; 300 runs under 512 took 88 s on a loaded machine): the agent serves as many writers at once as its
    limit allows, the others wait their turn, and every value of every run
    reaches MLflow and progress.csv (before: the agent died of `Too many open
    files` and, the loggers closed, nothing started another: 0 runs in MLflow)."""
    runs, limit = 150, 256
    root = tmp_path / "runs"
    env = child_env(tmp_path / "home", RLTRACK_AGENT_DIR=str(agents_of_test), RLTRACK_AGENT_IDLE="5")
    done = subprocess.run([PYTHON, "-c", MANY_RUNS, str(root), str(runs), str(limit)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr
    database = root / "mlflow.db"

    def delivered() -> dict[str, list[float]]:
        try:
            with sqlite3.connect(database) as db:
                rows = db.execute("SELECT runs.name, metrics.value FROM metrics JOIN runs ON runs.run_uuid = metrics.run_uuid "
                                  "WHERE metrics.key = 'collector/x' ORDER BY metrics.step").fetchall()  # fmt: skip
        except sqlite3.Error:  # not made yet
            return {}
        found: dict[str, list[float]] = {}
        for name, value in rows:
            found.setdefault(name, []).append(value)
        return found

    closed = time.monotonic()
    wait_until(lambda: sum(len(values) for values in delivered().values()) == runs * 20, 600, f"MLflow to hold the {runs * 20} values")
    print(f"{runs} runs under a limit of {limit} descriptors: every value in MLflow {time.monotonic() - closed:.1f} s after the script ended")
    assert delivered() == {f"run{i}": [float(1000 * i + step) for step in range(20)] for i in range(runs)}
    for i in range(runs):
        progress = root / f"run{i}" / "progress.csv"
        wait_until(lambda: progress.is_file() and progress.read_text().count("\n") == 21, 60, f"{progress} to hold 20 rows")
    [directory] = [path.parent for path in agents_of_test.glob("*/agent.lock")]
    log = (directory / "agent.log").read_text()
    assert log.count("serving") == 1 and "died" not in log, log[-3000:]


CLOSED_WITH_WORK_LEFT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    import rltrack
    backends = {"use": ["local", "stand_in_tracker:FileTracker"], "stand_in_tracker:FileTracker": {"hang_while": sys.argv[2]}}
    with rltrack.make_logger({"run": {"root": sys.argv[1], "name": "left", "close_timeout": 0}, "backends": backends}) as logger:
        for i in range(500):
            logger.write({"x": float(i)}, step=i)
    print("RUN_DIR=" + str(logger.run_dir), flush=True)
    """
)


@pytest.mark.reliability
def test_an_agent_killed_with_work_left_is_replaced_without_a_logger_and_its_death_is_told(tmp_path, agents_of_test):
    """The run's logger is gone, the tracker still owes 500 values, the agent
    is SIGKILLed: its keeper starts another (no logger is left to do it), which
    delivers everything; `rltrack status` shows the death, and the next
    logger says it on stderr, once (before: nothing started another agent,
    nothing was said)."""
    hold = tmp_path / "hold"
    hold.touch()
    env = child_env(tmp_path / "home", RLTRACK_AGENT_DIR=str(agents_of_test), RLTRACK_AGENT_IDLE="5")
    done = subprocess.run([PYTHON, "-c", CLOSED_WITH_WORK_LEFT, str(tmp_path / "runs"), str(hold), HELPERS], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_dir = read_run_dir(done.stdout.splitlines())
    [directory] = [path.parent for path in agents_of_test.glob("*/agent.lock")]
    killed = read_json(directory / "agent.json")["pid"]
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: (read_json(directory / "agent.json") or {}).get("pid") not in (None, killed), 60, "another agent to serve")
    hold.unlink()
    wait_until(lambda: len(received(run_dir)) == 500, 120, "the stand-in tracker to hold the 500 values")
    assert [event.data["x"] for event in received(run_dir)] == [float(i) for i in range(500)]
    status = json.loads(subprocess.run([PYTHON, "-m", "rltrack.cli", "status", "--json"], capture_output=True, text=True,
                                       env=env, check=True).stdout)  # fmt: skip
    assert status["last_death"]["pid"] == killed and status["last_death"]["how"] == "killed by SIGKILL"
    assert status["last_death"]["restart_in"] == 1.0
    told = []
    for _ in range(2):
        logger = subprocess.run([PYTHON, "-c", CLOSED_WITH_WORK_LEFT, str(tmp_path / "more"), str(hold), HELPERS], capture_output=True,
                                text=True, env=env, timeout=120)  # fmt: skip
        told.append([line for line in logger.stderr.splitlines() if "died" in line])
    assert len(told[0]) == 1 and f"the delivery agent {killed} died" in told[0][0] and "killed by SIGKILL" in told[0][0], told
    assert told[1] == []  # told once
