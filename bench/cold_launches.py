"""Issue 42's check, by hand: cold launches of a short TensorBoard-writing script under
`rltrack run` (local + MLflow + W&B offline), each into a fresh root, with a user's
`MlflowClient` opening the store the moment the launcher returns (round `after`) or in a
tight loop in a process of its own from before the launch (round `loop`). A launch is
whole when the launcher exits 0, the client raised nothing, the store holds one FINISHED
run with its 20 values and no `_alembic_tmp_*` table, and the user's loop raised nothing.

    python bench/cold_launches.py after 20 /tmp/cold     # then: loop 20 /tmp/cold
"""

import json, os, sqlite3, subprocess, sys, textwrap, time, traceback
from pathlib import Path
from mlflow import MlflowClient

PY = sys.executable
mode, N, base = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]) / sys.argv[1]
SCRIPT = "from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter('tb/short')\nfor s in range(20):\n    w.add_scalar('mine/value', float(s), s)\nw.close()\n"
LOOP = textwrap.dedent("""
    import sys, traceback
    from pathlib import Path
    from mlflow import MlflowClient
    uri, stop, said, started = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    started.touch(); n = 0
    while not stop.exists():
        try:
            c = MlflowClient(uri); c.search_runs([e.experiment_id for e in c.search_experiments()]); n += 1
        except Exception:
            with said.open("a") as f: f.write(traceback.format_exc())
    print(n)
""")
env = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("RLTRACK_", "MLFLOW_", "WANDB_"))
}
env.update(
    PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    WANDB_MODE="offline",
    WANDB_SILENT="true",
    MLFLOW_DISABLE_TELEMETRY="true",
)
results = []
for i in range(N):
    home = base / f"l{i}"
    (home / "runs").mkdir(parents=True)
    (home / "script.py").write_text(SCRIPT)
    (home / "c.toml").write_text(
        f'[run]\nroot = "{home / "runs"}"\n[backends]\nuse = ["local", "mlflow", "wandb"]\n'
    )
    uri = f"sqlite:///{home / 'runs' / 'mlflow.db'}"
    user = None
    if mode == "loop":
        user = subprocess.Popen(
            [
                PY,
                "-c",
                LOOP,
                uri,
                str(home / "stop"),
                str(home / "said"),
                str(home / "started"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        while not (home / "started").exists():
            time.sleep(0.05)
    t = time.monotonic()
    done = subprocess.run(
        [PY, "-m", "rltrack.cli", "run", "--config", "c.toml", "--", PY, "script.py"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t
    err = None
    try:
        c = MlflowClient(uri)
        runs = c.search_runs([e.experiment_id for e in c.search_experiments()])
        statuses = [r.info.status for r in runs]
        values = (
            sorted(
                (m.step, m.value)
                for m in c.get_metric_history(runs[0].info.run_id, "mine/value")
            )
            if runs
            else []
        )
    except Exception:
        err = traceback.format_exc().splitlines()[-1]
        statuses, values = [], []
    with sqlite3.connect(home / "runs" / "mlflow.db") as db:
        tmp = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE '%alembic_tmp%'"
            )
        ]
    looped = None
    if user is not None:
        (home / "stop").touch()
        looped = int(user.communicate()[0] or 0)
    said = (
        (home / "said").read_text().strip().splitlines()[-1:]
        if (home / "said").exists()
        else []
    )
    ok = (
        done.returncode == 0
        and err is None
        and statuses == ["FINISHED"]
        and values == [(s, float(s)) for s in range(20)]
        and not tmp
        and not said
    )
    results.append(ok)
    print(
        json.dumps(
            {
                "launch": i,
                "ok": ok,
                "wall_s": round(wall, 1),
                "rc": done.returncode,
                "statuses": statuses,
                "values": len(values),
                "alembic_tmp": tmp,
                "client_error": err,
                "user_loop_opens": looped,
                "user_errors": said,
                "stderr": done.stderr.strip().splitlines()[-2:] if not ok else None,
            }
        ),
        flush=True,
    )
print(f"{mode}: {sum(results)}/{len(results)} launches whole", flush=True)
