"""End-to-end throughput: records/s until every backend holds every record, read back to confirm.

Why this exists: a cheap calling thread is worth nothing if the background
falls behind. Issue 6 asks for the local backend end-to-end ≥ 100k records/s
(1M scalars/s) on its one pipeline thread, TensorBoard events written ≥ 20×
faster per scalar than `tensorboardX.SummaryWriter.add_scalar`, and MLflow
delivery ≥ 20× per-record `mlflow.log_metrics` on the same store.

Each measurement is a fresh run, timed from the first write until `close()`
returns (for rltrack: journal, local files and every tracker complete), then
read back (journal lines, TensorBoard event files with TensorBoard's own
reader, MLflow metric history, the `.wandb` file, Neptune's offline data).
The measurements of one group alternate, rotated (reversed every other time), `--repetitions` times;
the median and the min–max are reported.

  * local        - rltrack, four filters, backends {local}, N records, beside
                   the floor: the same three files written per record by the
                   shortest Python (orjson, one struct pack), no filters; the
                   ratio of the two (the target as a share of the floor,
                   which moves with the machine) and the CPU per record of
                   the training process and of the agent;
  * TensorBoard  - rltrack's `EventFileWriter.write` of N pre-built 10-scalar
                   events vs `tensorboardX.SummaryWriter.add_scalar` x 10 per
                   record, each until its file is closed, µs per scalar;
  * per tracker  - rltrack {local, <tracker>} vs the native client called once
                   per record (W&B `run.log`, Neptune 10 `append`,
                   `mlflow.log_metrics`) and, for MLflow, used its best way
                   (`MlflowClient.log_batch`, 1000 metrics a request, built
                   before timing); MLflow on the SQLite file and, unless
                   --quick/--no-server, on a local `mlflow server`;
  * agent CPU    - the delivery agent's CPU time (user + system, all its
                   threads, from /proc) per record while rltrack {local} and
                   rltrack {local, mlflow} (SQLite file) deliver N records,
                   timed from the agent holding a first record; the
                   difference is what MLflow's delivery costs it per record.

    python bench/bench_throughput.py            # several minutes, starts a local mlflow server
    python bench/bench_throughput.py --quick    # CI-sized, under a minute, no server
    python bench/bench_throughput.py --only-local --repetitions 5   # the local row alone, printed
    python bench/bench_throughput.py --only-agent-cpu --repetitions 5   # the agent CPU rows alone, printed
    python bench/bench_throughput.py --only-agent-cpu --agent-records 100000   # the same over 100k records a run (steadier)
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import trackers
from report import Section, arguments, verdict
from timing import KEYS, records, repeat_alternating

from rltrack.core.events import Event

TARGET_LOCAL_RPS, TARGET_TB_SPEEDUP, TARGET_MLFLOW_SPEEDUP = 100_000.0, 20.0, 20.0
#: The local target as a share of the floor measured in the same run: the issue's 100k against the 257k floor of its machine.
TARGET_LOCAL_OF_FLOOR = 100_000 / 257_000


class Counter:
    """Numbers the runs of a benchmark so each gets a fresh directory and name."""

    def __init__(self, root: Path) -> None:
        self.root, self.n = root, 0

    def next(self, label: str) -> tuple[Path, str]:
        self.n += 1
        return self.root, f"{label}_{self.n:03d}"


def check(what: str, held: int, wanted: int) -> None:
    if held != wanted:
        raise RuntimeError(f"{what}: read back {held} records, wrote {wanted}")


# ---- rltrack ------------------------------------------------------------------------


def rltrack_run(runs: Counter, backends: list[str], n: int, mlflow_uri: str | None = None, ready: bool = False) -> tuple[float, float, float]:
    """One run of n records through rltrack with `backends`, read back: its
    records/s, the agent's CPU µs per record meanwhile (NaN if another agent
    took over during the run) and the training process's (both of its
    threads: `write` and the pipeline). `ready`: timing starts
    once the agent holds a first record (in namespace "ready") in the local
    files and every tracker, so it has started, imported its client and
    opened its run: the native MLflow paths it is compared with create their
    client and run before their timing starts too (the W&B and Neptune ones
    start their run inside it, and so does rltrack without `ready`)."""
    root, name = runs.next("_".join(backends))
    recs = records(n)
    log = trackers.make_logger(root, name, backends, mlflow_uri)
    if ready:
        log.write({"fps": 0.0}, step=0, namespace="ready")
        trackers.settle(log)
    agent, cpu = agent_cpu_seconds()  # the logger has started one, if none ran
    own = time.process_time()
    start = time.perf_counter()
    for i, rec in enumerate(recs):
        log.write(rec, step=i, namespace="learner")
    complete = log.close()
    elapsed = time.perf_counter() - start
    own_us = (time.process_time() - own) / n * 1e6
    if not complete:
        raise RuntimeError(f"{log.run_dir}: close() returned before everything was delivered")
    agent_after, cpu_after = agent_cpu_seconds()
    if agent_after != agent and ready:
        raise RuntimeError(f"{log.run_dir}: the agent changed during the run ({agent} then {agent_after})")
    agent_us = (cpu_after - cpu) / n * 1e6 if agent_after == agent else math.nan
    check(f"{name} journal", trackers.journal_count(log.run_dir, "learner"), n)
    for tracker in backends[1:]:
        check(f"{name} {tracker}", trackers.ARRIVED[tracker](log.run_dir, "learner/fps"), n)
    return n / elapsed, agent_us, own_us


def rltrack_rps(runs: Counter, backends: list[str], n: int, mlflow_uri: str | None = None, ready: bool = False) -> Callable[[], float]:
    """records/s of rltrack with `backends` (see `rltrack_run`)."""
    return lambda: rltrack_run(runs, backends, n, mlflow_uri, ready)[0]


def local_rps(runs: Counter, n: int, cpu: list[tuple[float, float]]) -> Callable[[], float]:
    """records/s of rltrack {local} (see `rltrack_run`); each run's CPU µs per
    record of the training process and of the agent go to `cpu`: where the
    machine is busy they run one after the other, not side by side."""

    def run() -> float:
        rps, agent_us, own_us = rltrack_run(runs, trackers.LOCAL, n)
        cpu.append((own_us, agent_us))
        return rps

    return run


def agent_us_per_record(runs: Counter, backends: list[str], n: int) -> Callable[[], float]:
    """The agent's CPU µs per record of rltrack with `backends` (see `rltrack_run`)."""
    return lambda: rltrack_run(runs, backends, n, ready=True)[1]


def agent_cpu_seconds() -> tuple[int, float]:
    """The live delivery agent's pid and the CPU seconds (user + system,
    every thread) it has used so far, from /proc (Linux)."""
    from rltrack.agent.files import agent_dir

    pid = int(json.loads((agent_dir() / "agent.json").read_text())["pid"])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # from field 3, the state
    return pid, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def files_floor(runs: Counter, n: int) -> Callable[[], float]:
    """What the local files of a record cost at least in Python on this machine:
    for each record, on the calling thread, its journal line (orjson), its
    TensorBoard record (rltrack's `EventFileWriter.scalars`: one struct pack and
    one CRC) and its csv row (orjson), appended to three files. No filters, no
    text tables, no queue, no second thread: the local row cannot beat it."""

    def run() -> float:
        import orjson

        from rltrack.sinks.tfevents import EventFileWriter

        root, name = runs.next("floor")
        folder = root / name
        folder.mkdir(parents=True)
        recs = records(n)
        start = time.perf_counter()
        tb = EventFileWriter(folder)
        with (folder / "journal.jsonl").open("wb") as journal, (folder / "progress.csv").open("wb") as table:
            for i, rec in enumerate(recs):
                now = time.time()
                journal.write(orjson.dumps({"time": now, "namespace": "learner", "steps": {"step": i}, "data": rec}) + b"\n")
                tb.scalars(now, i, "learner/", rec)
                table.write(orjson.dumps([now, i, *rec.values()])[1:-1] + b"\r\n")
        tb.close()
        elapsed = time.perf_counter() - start
        check(f"{name} TensorBoard", tb_scalars(folder), n * len(KEYS))
        return n / elapsed

    return run


# ---- TensorBoard --------------------------------------------------------------------


def tb_scalars(logdir: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])


def tb_writer(runs: Counter, n: int, label: str, write_all: Callable[[Path, list[dict[str, float]]], None]) -> Callable[[], float]:
    """µs per scalar for `write_all(logdir, records)` to write n records of 10
    scalars and close its file; the scalars are then read back."""

    def run() -> float:
        root, name = runs.next(label)
        recs = records(n)
        start = time.perf_counter()
        write_all(root / name, recs)
        elapsed = time.perf_counter() - start
        check(name, tb_scalars(root / name), n * len(KEYS))
        return elapsed / (n * len(KEYS)) * 1e6

    return run


def rltrack_event_file(logdir: Path, recs: list[dict[str, float]]) -> None:
    """rltrack's event-file writer, one event of 10 scalars per record (as the pipeline thread calls it)."""
    from rltrack.sinks.tfevents import EventFileWriter

    writer = EventFileWriter(logdir)
    now = time.time()
    for i, rec in enumerate(recs):
        writer.write(Event(now, rec, "scalars", "learner", {"step": i}))
    writer.close()


def tensorboardx_add_scalar(logdir: Path, recs: list[dict[str, float]]) -> None:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for i, rec in enumerate(recs):
        for key, value in rec.items():
            writer.add_scalar(f"learner/{key}", value, i)
    writer.close()


# ---- native tracker clients -----------------------------------------------------------


def wandb_direct(runs: Counter, n: int) -> Callable[[], float]:
    def run() -> float:
        root, name = runs.next("wandb_direct")
        recs = records(n)
        start = time.perf_counter()
        wb = trackers.wandb_run(root / name, name)
        for i, rec in enumerate(recs):
            wb.log(rec, step=i)
        wb.finish()
        elapsed = time.perf_counter() - start
        check(name, trackers.wandb_count(root / name, "fps"), n)
        return n / elapsed

    return run


def neptune_direct(runs: Counter, n: int) -> Callable[[], float]:
    def run() -> float:
        import os

        root, name = runs.next("neptune_direct")
        os.environ["NEPTUNE_DATA_DIRECTORY"] = str(root / name / ".neptune")
        recs = records(n)
        start = time.perf_counter()
        nep = trackers.neptune_run()
        append = trackers.neptune_append(nep)
        for i, rec in enumerate(recs):
            append(rec, i)
        nep.stop()
        elapsed = time.perf_counter() - start
        check(name, trackers.neptune_count(root / name, "learner/fps"), n)
        return n / elapsed

    return run


def mlflow_per_record(uri: str, n: int) -> Callable[[], float]:
    """The request `mlflow.log_metrics(record, step)` makes, once per record, on `uri`."""

    def run() -> float:
        from mlflow.entities import Metric

        client, run_id = trackers.mlflow_run(uri, "bench-per-record")
        recs = records(n)
        start = time.perf_counter()
        for i, rec in enumerate(recs):
            now = int(time.time() * 1000)
            client.log_batch(run_id, metrics=[Metric(k, v, now, i) for k, v in rec.items()])
        elapsed = time.perf_counter() - start
        check("mlflow per record", len(client.get_metric_history(run_id, "fps")), n)
        return n / elapsed

    return run


def mlflow_log_batch(uri: str, n: int) -> Callable[[], float]:
    """MLflow's best way: `log_batch` of 1000 prepared metrics a request."""

    def run() -> float:
        from mlflow.entities import Metric

        client, run_id = trackers.mlflow_run(uri, "bench-log-batch")
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now + i, i) for i, rec in enumerate(records(n)) for k, v in rec.items()]
        start = time.perf_counter()
        for chunk in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[chunk : chunk + 1000])
        elapsed = time.perf_counter() - start
        check("mlflow log_batch", len(client.get_metric_history(run_id, "fps")), n)
        return n / elapsed

    return run


# ---- report -----------------------------------------------------------------------------


def rows(results: dict[str, dict[str, Any]], unit: str, reference: str | None = None) -> list[str]:
    lines = []
    for name, r in results.items():
        ratio = f" | {r['median'] / results[reference]['median']:,.3g}×" if reference else ""
        lines.append(f"| {name} | {r['median']:,.1f} | {r['lo']:,.1f}–{r['hi']:,.1f}{ratio} |")
    head = f"| path | median {unit} | min–max |" + (" ÷ the reference |" if reference else "")
    return [head, "|---|---:|---:|" + ("---:|" if reference else ""), *lines]


def main() -> None:
    parser = arguments(__doc__, "fewer records, one repetition, no mlflow server")
    parser.add_argument("--no-server", action="store_true", help="skip the local mlflow server")
    parser.add_argument("--repetitions", type=int, default=None, help="default 3, quick 1")
    parser.add_argument("--only-local", action="store_true", help="only the local backend row (nothing is appended to RESULTS.md)")
    parser.add_argument("--only-agent-cpu", action="store_true", help="only the agent CPU rows (nothing is appended to RESULTS.md)")
    parser.add_argument("--agent-records", type=int, default=None, help="records per agent CPU run (default: as the tracker rows, 5,000; quick 1,000)")
    args = parser.parse_args()
    reps = args.repetitions or (1 if args.quick else 3)
    n_local = 20_000 if args.quick else 200_000
    n_tb = 2_000 if args.quick else 20_000
    n_tracker = 1_000 if args.quick else 5_000
    n_per_record = {"sqlite": 30 if args.quick else 200, "server": 5 if args.quick else 30}
    section = Section()
    out: list[str] = []
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-throughput-") as tmp_name:
        tmp = Path(tmp_name)
        trackers.isolate(tmp)
        runs = Counter(tmp / "runs")
        if not args.only_agent_cpu:
            local_row = f"rltrack {{local}}, {n_local:,} records"
            floor_row = "floor: journal line, TensorBoard record, csv row per record, one thread, no filters"
            cpu_local: list[tuple[float, float]] = []
            local = repeat_alternating({local_row: local_rps(runs, n_local, cpu_local),
                                        floor_row: files_floor(runs, n_local)}, reps)  # fmt: skip
            local_median = local[local_row]["median"]
            of_floor = local_median / local[floor_row]["median"]
            cpu_text = ", ".join(f"{own:.1f} + {agent:.1f}" for own, agent in cpu_local)
            out += ["### Local backend, end to end (records/s)", "", *rows(local, "records/s", local_row), "",
                    f"CPU µs per record, training process + agent, each repetition: {cpu_text}.", ""]  # fmt: skip
            summary.append(verdict("local backend end to end", f"{local_median:,.0f} records/s", f"≥ {TARGET_LOCAL_RPS:,.0f}", local_median >= TARGET_LOCAL_RPS))
            summary.append(verdict("local backend end to end ÷ the floor of the same run", f"{of_floor:.2f}×",
                                   f"≥ {TARGET_LOCAL_OF_FLOOR:.2f}×, the issue's 100k ÷ 257k", of_floor >= TARGET_LOCAL_OF_FLOOR))  # fmt: skip
            if args.only_local:
                values = ", ".join(f"{v:,.0f}" for v in local[local_row]["values"])
                print("\n".join([*out, f"each repetition: {values} records/s", "", *summary]))
                return

        n_agent = args.agent_records or n_tracker
        agent_local, agent_mlflow = f"agent, rltrack {{local}} ({n_agent:,} records)", f"agent, rltrack {{local, mlflow}} (SQLite file, {n_agent:,} records)"
        cpu = repeat_alternating({agent_local: agent_us_per_record(runs, trackers.LOCAL, n_agent),
                                  agent_mlflow: agent_us_per_record(runs, ["local", "mlflow"], n_agent)}, reps)  # fmt: skip
        mlflow_us = cpu[agent_mlflow]["median"] - cpu[agent_local]["median"]
        out += ["### The delivery agent's CPU per record (µs)", "", *rows(cpu, "µs/record", agent_local), "",
                f"MLflow's delivery costs the agent {mlflow_us:.1f} µs of CPU per record (the difference of the medians).", ""]  # fmt: skip
        if args.only_agent_cpu:
            values = "; ".join(f"{name}: " + ", ".join(f"{v:.1f}" for v in cpu[name]["values"]) for name in cpu)
            print("\n".join([*out, f"each repetition (µs/record): {values}"]))
            return

        tb = repeat_alternating({"tensorboardX SummaryWriter.add_scalar": tb_writer(runs, n_tb, "tbx", tensorboardx_add_scalar),
                                 "rltrack EventFileWriter.write (10 scalars an event)": tb_writer(runs, n_tb, "tb", rltrack_event_file)}, reps)  # fmt: skip
        speedup = tb["tensorboardX SummaryWriter.add_scalar"]["median"] / tb["rltrack EventFileWriter.write (10 scalars an event)"]["median"]
        out += [f"### TensorBoard event files, {n_tb * len(KEYS):,} scalars until the file is closed (µs per scalar)", "",
                *rows(tb, "µs/scalar", "tensorboardX SummaryWriter.add_scalar"), ""]  # fmt: skip
        summary.append(verdict("TensorBoard events per scalar vs tensorboardX", f"{speedup:.0f}× faster", f"≥ {TARGET_TB_SPEEDUP:g}×", speedup >= TARGET_TB_SPEEDUP))

        for tracker, direct in (("wandb", wandb_direct), ("neptune", neptune_direct)):
            res = repeat_alternating({f"{tracker} client, one call per record": direct(runs, n_tracker),
                                      f"rltrack {{local, {tracker}}}": rltrack_rps(runs, ["local", tracker], n_tracker)}, reps)  # fmt: skip
            out += [f"### {tracker} (offline), {n_tracker:,} records until finish/close (records/s)", "",
                    *rows(res, "records/s", f"{tracker} client, one call per record"), ""]  # fmt: skip

        with trackers.mlflow_server(tmp / "server", not (args.quick or args.no_server)) as server_uri:
            stores = {"sqlite": f"sqlite:///{tmp / 'runs' / 'mlflow.db'}"} | ({"server": server_uri} if server_uri else {})
            for store, uri in stores.items():
                per_record = f"log_metrics' request per record ({n_per_record[store]} records)"
                res = repeat_alternating({
                    per_record: mlflow_per_record(uri, n_per_record[store]),
                    f"MlflowClient.log_batch, 1000 metrics a request ({n_tracker:,} records)": mlflow_log_batch(uri, n_tracker),
                    f"rltrack {{local, mlflow}} ({n_tracker:,} records)": rltrack_rps(runs, ["local", "mlflow"], n_tracker, server_uri if store == "server" else None, ready=True),
                }, reps)  # fmt: skip
                ratio = res[f"rltrack {{local, mlflow}} ({n_tracker:,} records)"]["median"] / res[per_record]["median"]
                ceiling = res[f"MlflowClient.log_batch, 1000 metrics a request ({n_tracker:,} records)"]["median"] / res[per_record]["median"]
                out += [f"### MLflow on {'the SQLite file' if store == 'sqlite' else 'a local mlflow server (SQLite store)'} (records/s)", "",
                        *rows(res, "records/s", per_record), ""]  # fmt: skip
                summary.append(verdict(f"MLflow delivery vs per-record log_metrics, {store}", f"{ratio:.1f}× (raw log_batch: {ceiling:.1f}×)",
                                       f"≥ {TARGET_MLFLOW_SPEEDUP:g}×", ratio >= TARGET_MLFLOW_SPEEDUP))  # fmt: skip
    body = "\n".join([f"{reps} repetition(s) per path, alternating; median and min–max. Records of 10 floats; rltrack with the four filters "
                      "(time 0 s: every record reaches every backend).", "", *out, "Verdict:", "", *summary])  # fmt: skip
    section.finish("bench_throughput: end-to-end records/s, read back", body, write=not args.no_write)


if __name__ == "__main__":
    main()
