"""A script whose tracker is unreachable for the whole run, then `rltrack sync` once it is back (issue 17).

Why this exists: a tracker outage must cost a training script no more than
its `run.close_timeout` at the end, and lose nothing. Issue 17 asks that a
script whose tracker is unreachable for the whole run exits within
`close_timeout` + 1 s, and that `rltrack sync` after the tracker is back
delivers every value exactly once.

The script (a fresh Python process, as a user runs it):

    with rltrack.make_logger({"run": {"root": ..., "name": ..., "close_timeout": T},
                              "backends": {"use": ["local", "mlflow"],
                                           "mlflow": {"tracking_uri": "http://127.0.0.1:<port>"}}}) as logger:
        for i in range(records):                      # 200 or 2,000 records of 10 metrics
            logger.write({"m0": ..., ..., "m9": ...}, step=i)
        print("closing", time.monotonic())            # the with block's exit closes the logger

where nothing listens on `<port>` (a free loopback port, kept for the
`mlflow server` started later), with 200 and 2,000 records and T = 0, 2 and
5 s (the default), each `--repetitions` times. Measured: from the "closing" line to the process's
exit, seen by the parent (the close, the agent's wait, interpreter shutdown);
the script's whole wall time beside it. Each script gets the same agent
directory of its own (RLTRACK_AGENT_DIR in a temporary folder); the agent
keeps retrying MLflow after each run ends for RLTRACK_AGENT_RETRY seconds
(default 300; 5 here, so the benchmark need not wait five minutes), then leaves
the run to `rltrack sync`, and exits after RLTRACK_AGENT_IDLE = 5 s idle.

Once the agent has exited, a real `mlflow server` is started on that port,
`rltrack sync RUN --to mlflow` runs for every run (timed), every value is read
back with `MlflowClient.get_metric_history` (each of the 10 metrics: every
step's value once, none missing, none twice), the MLflow run's status is
checked, and `rltrack sync` is run a second time on every run, after which the
values must still be there exactly once.

    python bench/bench_outage.py            # 18 scripts, about three minutes
    python bench/bench_outage.py --quick    # 200 records, T = 0 and 2 s, once each
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trackers  # also puts the repository and tests/helpers/ on sys.path
from mlflow_server import MlflowServer, tracker
from report import Section, arguments, verdict

import rltrack
from rltrack.agent.files import agent_running, registrations
from rltrack.delivery.cursor import tracker_state

METRICS = [f"m{k}" for k in range(10)]
MARGIN = 1.0  # seconds past close_timeout the script may take to exit

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import rltrack
    root, name, uri, close_timeout, records = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    config = {"run": {"root": root, "name": name, "close_timeout": close_timeout},
              "backends": {"use": ["local", "mlflow"], "mlflow": {"tracking_uri": uri}}}
    with rltrack.make_logger(config) as logger:
        for i in range(records):
            logger.write({f"m{k}": i + k / 100 for k in range(10)}, step=i)
        print("closing", time.monotonic(), flush=True)
    """
)


def run_script(root: Path, name: str, uri: str, close_timeout: float, records: int, env: dict[str, str]) -> dict[str, Any]:
    """Runs the script: seconds from "closing" to its exit, its wall seconds, its stderr."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root), name, uri, str(close_timeout), str(records)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    stdout, stderr = child.communicate(timeout=300)
    ended = time.monotonic()
    if child.returncode != 0 or not stdout.startswith("closing"):
        raise RuntimeError(f"the script failed (exit {child.returncode}):\n{stderr[-3000:]}")
    closing = float(stdout.split()[1])  # CLOCK_MONOTONIC: one clock for every process on Linux
    return {"run": name, "records": records, "close_timeout": close_timeout, "exit_after_close": ended - closing,
            "wall": ended - started, "told": "rltrack sync" in stderr and "--to mlflow" in stderr}  # fmt: skip


def check(run_dir: Path, records: int) -> dict[str, Any]:
    """The run's journal and status, and every value as MLflow holds it: missing and extra (a value twice) over the 10 metrics."""
    journal = sum(1 for event in rltrack.read_journal(run_dir) if "m0" in event.data)
    status = json.loads((run_dir / "meta.json").read_text())["status"]
    if not tracker_state(run_dir, "mlflow"):  # sync created no MLflow run: nothing reached it
        return {"journal": journal, "meta": status, "held": 0, "missing": records * len(METRICS), "extra": 0, "status": "no MLflow run"}
    client, run_id = tracker(run_dir)
    missing = extra = held = 0
    for k, key in enumerate(METRICS):
        got = Counter(round(m.value, 6) for m in client.get_metric_history(run_id, key))
        expected = Counter(round(i + k / 100, 6) for i in range(records))
        held += sum(got.values())
        missing += sum((expected - got).values())
        extra += sum((got - expected).values())
    return {"journal": journal, "meta": status, "held": held, "missing": missing, "extra": extra, "status": client.get_run(run_id).info.status}


def sync(run_dir: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rltrack.cli", "sync", str(run_dir), "--to", "mlflow"], capture_output=True, text=True,
                          env=env, timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"rltrack sync {run_dir} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> None:
    parser = arguments(__doc__, "200 records, close_timeout 0 and 2 s, once each")
    parser.add_argument("--records", type=int, nargs="+", default=[200, 2_000], help="records of 10 metrics per script")
    parser.add_argument("--timeouts", type=float, nargs="+", default=[0.0, 2.0, 5.0], help="run.close_timeout values")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.records, args.timeouts, args.repetitions = [200], [0.0, 2.0], 1
    section = Section()
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-outage-") as tmp_name:
        tmp = Path(tmp_name)
        trackers.isolate(tmp)
        server = MlflowServer(tmp / "mlflow_server")  # its port is chosen now; nothing listens there until start()
        (tmp / "mlflow_server").mkdir()
        env = {**os.environ, "RLTRACK_AGENT_DIR": str(tmp / "agents"), "RLTRACK_AGENT_RETRY": "5", "RLTRACK_AGENT_IDLE": "5"}
        root = tmp / "runs"
        scripts = []
        for rep in range(args.repetitions):
            for records in args.records:
                for timeout in args.timeouts:
                    scripts.append(run_script(root, f"down_{records}_{timeout:g}s_{rep}", server.uri, timeout, records, env))
                    print(f"  {records} records, close_timeout {timeout:g} s: exited {scripts[-1]['exit_after_close']:.2f} s after closing", flush=True)
        agents = [tmp / "agents" / d for d in os.listdir(tmp / "agents")]
        deadline = time.monotonic() + 120
        while any(registrations(a) or agent_running(a) for a in agents) and time.monotonic() < deadline:
            time.sleep(0.2)  # the agent gives the runs up to `rltrack sync` and exits
        agent_left = any(agent_running(a) for a in agents)
        server.start()
        try:
            for s in scripts:
                run_dir = root / s["run"]
                s["sync_s"] = sync(run_dir, env)
                s["first"] = check(run_dir, s["records"])
                s["again_s"] = sync(run_dir, env)
                s["second"] = check(run_dir, s["records"])
        finally:
            server.stop()
    section.finish("bench_outage: a script whose tracker is down, then rltrack sync", report(args, scripts, agent_left), write=not args.no_write)


def report(args: argparse.Namespace, scripts: list[dict[str, Any]], agent_left: bool) -> str:
    lines = ["| records | close_timeout s | scripts | exit after closing s: median (min–max) | allowed s | script wall s: median "
             "| journals holding every record | meta.json status |", "|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for records in args.records:
        for timeout in args.timeouts:
            mine = [s for s in scripts if s["close_timeout"] == timeout and s["records"] == records]
            exits = [s["exit_after_close"] for s in mine]
            complete = sum(s["first"]["journal"] == records for s in mine)
            statuses = ", ".join(f"{n} {status}" for status, n in Counter(s["first"]["meta"] for s in mine).items())
            lines.append(f"| {records:,} | {timeout:g} | {len(mine)} | {statistics.median(exits):.2f} ({min(exits):.2f}–{max(exits):.2f}) | "
                         f"{timeout + MARGIN:g} | {statistics.median(s['wall'] for s in mine):.2f} | {complete} of {len(mine)} | {statuses} |")  # fmt: skip
    worst = max(s["exit_after_close"] - s["close_timeout"] for s in scripts)
    complete_all = sum(s["first"]["journal"] == s["records"] for s in scripts)
    in_journal = sum(s["first"]["journal"] * len(METRICS) for s in scripts)
    written = sum(s["records"] * len(METRICS) for s in scripts)
    # values sync delivered against what the journal held: extra anywhere, or missing beyond what never reached the journal
    wrong = sum(s[w]["extra"] + max(0, s[w]["missing"] - (s["records"] - s["first"]["journal"]) * len(METRICS)) for s in scripts for w in ("first", "second"))
    lost = written - in_journal
    finished = sum(s["first"]["status"] == "FINISHED" for s in scripts)
    sync_lines = ["| run | records in the journal | meta.json status | first sync s | values in MLflow | missing | extra | MLflow status "
                  "| second sync s | after it: missing | extra |", "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"]  # fmt: skip
    for s in scripts:
        f, g = s["first"], s["second"]
        sync_lines.append(f"| {s['run']} | {f['journal']:,} | {f['meta']} | {s['sync_s']:.1f} | {f['held']:,} | {f['missing']:,} | {f['extra']} "
                          f"| {f['status']} | {s['again_s']:.1f} | {g['missing']:,} | {g['extra']} |")  # fmt: skip
    return "\n".join([
        f"Each script: {' or '.join(f'{r:,}' for r in args.records)} records of 10 metrics, backends local + mlflow, MLflow at a loopback "
        "port nothing listens on. Exit after closing: from the script's `print` just before the `with` block ends to the process's exit, "
        "seen by the parent. The journal and meta.json are read after the agent has given the runs up.",
        "",
        *lines,
        "",
        f"{sum(s['told'] for s in scripts)} of {len(scripts)} scripts printed the `rltrack sync <run> --to mlflow` line at close. "
        f"{'The agent had **not** exited' if agent_left else 'The agent had given the runs up and exited'} before the server was started "
        "(RLTRACK_AGENT_RETRY=5). Then `mlflow server` on that port, `rltrack sync RUN --to mlflow` per run, read back with "
        "`MlflowClient.get_metric_history` (10 values a record), then `rltrack sync` again and read back again:",
        "",
        *sync_lines,
        "",
        "Verdict:",
        "",
        verdict("exit of a script whose tracker is down, after closing", f"at most close_timeout + {worst:.2f} s",
                f"≤ close_timeout + {MARGIN:g} s", worst <= MARGIN),
        verdict("every record the script wrote is in its journal when the process has exited",
                f"{complete_all} of {len(scripts)} scripts ({lost:,} of {written:,} values never reached the journal)",
                "every script", complete_all == len(scripts)),
        verdict("`rltrack sync` once the tracker is back: every value of the journal exactly once in MLflow (after a first and a second sync)",
                f"{wrong} missing or extra", "0", wrong == 0),
        verdict("the MLflow run ends as the script did (FINISHED)", f"{finished} of {len(scripts)}", "every script", finished == len(scripts)),
    ])  # fmt: skip


if __name__ == "__main__":
    main()
