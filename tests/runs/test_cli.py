"""`rltrack show` reads a run directory back."""

from __future__ import annotations

import subprocess
import sys

import rltrack


def test_show_prints_status_and_last_values(tmp_path):
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "cli"}}) as logger:
        for i in range(3):
            logger.write({"reward": 10.0 * i}, step=i, namespace="collector")
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(logger.run_dir)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cli: finished" in done.stdout
    assert "3 events in the journal" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "collector/reward" in line)
    assert row.split("|")[2].strip() == "20"


def test_show_refuses_a_directory_that_is_not_a_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "not a run directory" in done.stderr


def test_show_and_runs_show_read_the_same_directories(tmp_path):
    """A plain SB3 log folder (SB3's own logger, no rltrack): `runs show` reads it, so does `show`."""
    from stable_baselines3.common.logger import configure

    folder = tmp_path / "runs" / "sb3_plain"
    sb3_logger = configure(str(folder), ["csv"])
    for step in (128, 256):
        sb3_logger.record("rollout/ep_rew_mean", step / 10)
        sb3_logger.record("time/total_timesteps", step)
        sb3_logger.dump(step=step)
    sb3_logger.close()
    runs_show = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "show", str(folder), "--root", str(tmp_path / "runs")],
                               capture_output=True, text=True)  # fmt: skip
    assert runs_show.returncode == 0, runs_show.stderr
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sb3_plain: unknown, started ") and "(sb3 format)" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "rollout/ep_rew_mean" in line)
    assert row.split("|")[2].strip() == "25.6"


def test_a_missing_or_unwritable_root_is_an_error_message(tmp_path):
    missing = tmp_path / "no_such_root"
    for command in (["runs", "ls"], ["runs", "index"], ["plot", "--metric", "m", "x", "-o", str(tmp_path / "p.png")]):
        done = subprocess.run([sys.executable, "-m", "rltrack.cli", *command, "--root", str(missing)], capture_output=True, text=True)
        assert done.returncode == 2 and f"no runs root at {missing}: it does not exist" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not missing.exists()  # not created: a mistyped --root is not an empty root
    # /proc/self/fdinfo: a directory nobody can create files in, not even root
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "ls", "--root", "/proc/self/fdinfo"], capture_output=True, text=True)
    assert done.returncode == 2 and "read-only for you" in done.stderr and "Traceback" not in done.stderr, done.stderr
