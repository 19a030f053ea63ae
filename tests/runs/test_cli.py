"""`rltrack show` reads a run directory back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rltrack

DI_ENGINE_FIXTURE = Path(__file__).parents[1] / "helpers" / "fixtures" / "dingine_dqn_cartpole"


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
    sb3_logger = configure(str(folder), ["csv", "json", "tensorboard"])
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


def test_show_and_runs_show_agree_on_a_di_engine_run_and_an_rltrack_run(tmp_path):
    with rltrack.make_logger({"run": {"root": str(tmp_path / "runs"), "name": "own"}}) as logger:
        logger.write({"reward": 1.0}, step=1, namespace="collector")
    for folder, heading in ((DI_ENGINE_FIXTURE, "(di-engine format)"), (logger.run_dir, "(rltrack format)")):
        runs_show = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "show", str(folder), "--root", str(tmp_path / "runs")],
                                   capture_output=True, text=True)  # fmt: skip
        show = subprocess.run([sys.executable, "-m", "rltrack.cli", "show", str(folder)], capture_output=True, text=True)
        assert runs_show.returncode == show.returncode == 0, runs_show.stderr + show.stderr
        assert heading in show.stdout.splitlines()[0]


def test_a_missing_or_unwritable_root_is_an_error_message(tmp_path):
    missing = tmp_path / "no_such_root"
    for command in (["runs", "ls"], ["runs", "index"], ["plot", "--metric", "m", "x", "-o", str(tmp_path / "p.png")]):
        done = subprocess.run([sys.executable, "-m", "rltrack.cli", *command, "--root", str(missing)], capture_output=True, text=True)
        assert done.returncode == 2 and f"no runs root at {missing}: it does not exist" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not missing.exists()  # not created: a mistyped --root is not an empty root
    # /proc/self/fdinfo: a directory nobody can create files in, not even root: its index is in the user's cache
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "runs", "ls", "--root", "/proc/self/fdinfo"], capture_output=True, text=True,
                          env={**os.environ, "RLTRACK_CACHE_DIR": str(cache)})  # fmt: skip
    assert done.returncode == 0 and "0 run(s) under /proc/self/fdinfo" in done.stderr, done.stderr
    assert list(cache.glob("index/*/rltrack_index.db"))


def test_a_read_only_root_that_holds_runs_is_listed_and_stays_as_it_was(tmp_path):
    """A root of runs without an index, mode 555 (a read-only mount, a
    colleague's results), read by a user who is not its owner (as root,
    which ignores modes, the command runs in a user namespace where mode 555
    binds): listed and reported from an index in the user's cache (issue 36)."""
    root = tmp_path / "runs"
    with rltrack.make_logger({"run": {"root": str(root), "name": "kept"}}) as logger:
        logger.write({"reward": 1.0}, step=1, namespace="collector")
    (root / "rltrack_index.db").unlink(missing_ok=True)
    before = sorted(p.name for p in root.iterdir())
    as_user: list[str] = []
    if os.geteuid() == 0:
        unshare = shutil.which("unshare")
        probe = subprocess.run([unshare, "--user", "--map-user=65534", "--map-group=65534", "true"], capture_output=True) if unshare else None
        if probe is None or probe.returncode != 0:
            pytest.skip("running as root and user namespaces are not available: a mode of 555 binds nobody here")
        as_user = [unshare, "--user", "--map-user=65534", "--map-group=65534"]
    root.chmod(0o555)
    cache = tmp_path / "cache"
    try:
        listed = subprocess.run([*as_user, sys.executable, "-m", "rltrack.cli", "runs", "ls", "--root", str(root), "--json"], capture_output=True,
                                text=True, env={**os.environ, "RLTRACK_CACHE_DIR": str(cache)})  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert [row["task"] for row in json.loads(listed.stdout)] == ["kept"]
        page = tmp_path / "r.html"
        done = subprocess.run([*as_user, sys.executable, "-m", "rltrack.cli", "report", "--task", "kept", "-o", str(page), "--root", str(root)],
                              capture_output=True, text=True, env={**os.environ, "RLTRACK_CACHE_DIR": str(cache)})  # fmt: skip
        assert done.returncode == 0 and page.is_file(), done.stderr
    finally:
        root.chmod(0o755)
    assert sorted(p.name for p in root.iterdir()) == before  # no index, no journal of one


def run_show(run_dir) -> tuple[subprocess.CompletedProcess[str], int]:
    """`rltrack show` in a child of its own, and that child's peak memory in MiB (ru_maxrss of its only child)."""
    script = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run([sys.executable, '-m', 'rltrack.cli', 'show', sys.argv[1]], capture_output=True, text=True)\n"
        "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
        "sys.exit(done.returncode)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], capture_output=True, text=True)
    lines = done.stdout.splitlines()
    return subprocess.CompletedProcess(done.args, done.returncode, "\n".join(lines[:-1]), done.stderr), int(lines[-1])


def test_show_skips_garbage_bytes_and_reads_past_a_huge_line(tmp_path):
    """A journal damaged in the middle (bytes that are no UTF-8, a 100 MB line)
    is shown: the damage is counted, the events around it are read, the huge
    line is never held whole, and a long value is printed cut."""
    with rltrack.make_logger({"run": {"root": str(tmp_path), "name": "damaged"}}) as logger:
        logger.write({"reward": 1.0}, step=1, namespace="collector")
    journal = logger.run_dir / "journal.jsonl"
    good = next(line for line in journal.read_bytes().splitlines(keepends=True) if b'"reward"' in line)
    later = good.replace(b'"reward":1.0', b'"reward":2.0').replace(b'"time":', b'"time":1e10,"_":', 1)
    huge = b'{"schema":1,"time":2e10,"namespace":"collector","kind":"scalars","steps":{"step":3},"data":{"note":"' + b"x" * 100_000_000 + b'"}}\n'
    long_value = b'{"schema":1,"time":3e10,"namespace":"collector","kind":"scalars","steps":{"step":4},"data":{"long":"' + b"y" * 1_000_000 + b'"}}\n'
    with journal.open("ab") as f:
        f.write(b"\xff\xfe\x80 not utf-8 \xc3\x28\n")
        f.write(later)
        f.write(huge)
        f.write(long_value)
    done, peak_mib = run_show(logger.run_dir)
    assert done.returncode == 0, done.stderr
    assert "3 events in the journal" in done.stdout
    assert "1 journal lines that are not events skipped" in done.stdout and "1 journal lines over 16 MiB skipped" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "collector/reward" in line)
    assert row.split("|")[2].strip() == "2"
    assert "y" * 200 + "... (1000000 characters)" in done.stdout and len(done.stdout) < 5_000
    assert peak_mib < 400, f"show took {peak_mib} MiB for a journal with a 100 MB line"
