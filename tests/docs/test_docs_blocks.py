"""Every code block of README.md and docs/ runs (issue 38).

Each Python and shell block runs as it is, in an empty temporary directory,
in a child process of this Python (the venv's `python` and `rltrack` first on
PATH), against the real backends it names: MLflow on a SQLite file, W&B
offline, trackio's store, SB3 and Ray trainings. Whatever a block leaves
behind is then read back: every run directory finished with a journal, every
MLflow store has a run with metrics, every W&B offline file has history rows,
every trackio store has logs. TOML and YAML blocks are configs: they must
load and every backend table in them must pass its backend's check (a renamed
option fails here), unless marked not run (then they must parse). JSON blocks must parse. A block after
`<!-- not run: <reason> -->` is only checked for syntax.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from markdown_blocks import Block, blocks
from waiting import wait_until

REPO = Path(__file__).parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
STANDINS = REPO / "tests" / "helpers" / "standins"  # the marked launchpad stand-in `import acme` needs (design.md §4)
PYTHON = ("python", "py")
SHELL = ("sh", "bash", "shell")
CONFIG = ("toml", "yaml", "yml")
CHECKED = (*PYTHON, *SHELL, *CONFIG, "json", "jsonl")
RAY_START_TIMEOUT = "timed out during startup"
STORE_WAIT = 120  # seconds the agent may take to fill a store after a block ends (it runs at the lowest priority)


def _all_blocks() -> list[Block]:
    """Every checked block once: a block repeated word for word on another page (README's examples) runs at its first place."""
    unique: dict[tuple[str, str, str | None], Block] = {}
    for page in PAGES:
        for block in blocks(page):
            if block.lang in CHECKED:
                unique.setdefault((block.lang, block.code, block.not_run), block)
    return list(unique.values())


#: What makes a block take over ~10 s here (Ray's start, an SB3 training, MLflow's import and store migrations): marked slow.
SLOW_WORDS = ("from ray", "import ray", "stable_baselines3", "mlflow")


def _param(block: Block):
    slow = block.not_run is None and block.lang not in CONFIG and any(word in block.code for word in SLOW_WORDS)
    return pytest.param(block, id=f"{block.path.relative_to(REPO)}:{block.line}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block", [_param(block) for block in _all_blocks()])
def test_block(block: Block, tmp_path: Path) -> None:
    if block.lang in CONFIG and block.not_run is None:
        _check_config(block)
    elif block.lang == "json":
        json.loads(block.code)
    elif block.lang == "jsonl":  # JSON lines: each line a document
        for line in block.code.splitlines():
            if line.strip():
                json.loads(line)
    elif block.not_run is not None:
        _check_syntax(block, tmp_path)
    else:
        _run(block, tmp_path)
        _read_back(tmp_path)


def test_the_collector_sees_the_pages_blocks() -> None:
    """The collector finds README's blocks and honours the not-run marker (else the test above could pass on nothing)."""
    readme = [block for block in blocks(REPO / "README.md") if block.lang in CHECKED]
    assert any(block.lang in PYTHON and block.not_run is None for block in readme)
    assert all(block.not_run.strip() for block in readme if block.not_run is not None)
    config_page = [block for block in blocks(REPO / "docs" / "configuration.md") if block.lang == "toml"]
    assert config_page, "docs/configuration.md lost its TOML example"


def _check_config(block: Block) -> None:
    from rltrack.delivery.construct import backend_type
    from rltrack.training.config import load_config

    data = tomllib.loads(block.code) if block.lang == "toml" else yaml.safe_load(block.code)
    where = block.name
    config = load_config(data)
    for name, settings in (data.get("backends") or {}).items():
        if name == "storage":  # its uri and run come from run.storage, as make_logger adds them
            settings = {**settings, "uri": str(config["run"]["storage"]), "run": "."}
        if name != "use":
            backend_type(name, settings, where)
    assert config["run"]["root"]


def _check_syntax(block: Block, tmp_path: Path) -> None:
    if block.lang in PYTHON:
        compile(block.code, block.name, "exec")
    elif block.lang == "toml":  # not an rltrack config (a package's pyproject.toml, say)
        tomllib.loads(block.code)
    elif block.lang in CONFIG:
        yaml.safe_load(block.code)
    else:
        script = tmp_path / "block.sh"
        script.write_text(block.code)
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{block.name}: {done.stderr}"


def _run(block: Block, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(STANDINS)) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["WANDB_SILENT"] = "true"
    if block.lang in PYTHON:
        (tmp_path / "block.py").write_text(block.code)
        command = [sys.executable, "block.py"]
    else:
        (tmp_path / "block.sh").write_text(block.code)
        command = ["bash", "-euo", "pipefail", "block.sh"]
    for attempt in (1, 2, 3):
        with subprocess.Popen(
            command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        ) as process:
            stdout, stderr = process.communicate()
        _end_group(process.pid)
        if RAY_START_TIMEOUT not in stderr:
            break  # else Ray's fixed 30 s raylet registration was missed on a loaded machine: tried again, as tests/conftest.py does
    assert process.returncode == 0, f"{block.name} exited {process.returncode}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-5000:]}"


def _end_group(pid: int) -> None:
    """Ends what a block left running in its session (the Ray processes of a
    start that failed, a server): rltrack's agent is in a group of its own
    and stays for the next block."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing left


def _read_back(tmp_path: Path) -> None:
    """What the block's runs left in the stores it names, read back with each store's own reader."""
    for meta in tmp_path.rglob("meta.json"):
        run_dir = meta.parent
        if "archive" in run_dir.parts or not (run_dir / "journal.jsonl").exists():
            continue  # a foreign run directory the block wrote by hand
        wait_until(
            lambda: json.loads(meta.read_text()).get("status") not in (None, "running"),
            STORE_WAIT,
            f"{run_dir} to end (meta.json status)",
        )
        assert (run_dir / "journal.jsonl").stat().st_size > 0, f"{run_dir}: empty journal"
    for store in tmp_path.rglob("mlflow.db"):
        _mlflow_has_metrics(store)
    for wandb_file in tmp_path.rglob("run-*.wandb"):
        import wandb_reader

        wandb_reader.wait_complete(wandb_file, STORE_WAIT)
        assert wandb_reader.history(wandb_file), f"{wandb_file}: no history rows"
    for directory in {path.parent for path in tmp_path.rglob("*.db") if path.parent.name == "trackio"}:
        import trackio_reader

        for project in trackio_reader.projects(directory):
            logs = trackio_reader.store(directory, project)["logs"]
            assert any(logs.values()), f"trackio store {directory}, project {project}: no logs"


def _mlflow_has_metrics(store: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")

    def metrics() -> bool:
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        return bool(runs) and all(run.data.metrics for run in runs)

    wait_until(metrics, STORE_WAIT, f"every MLflow run in {store} to hold metrics")
