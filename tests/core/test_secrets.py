"""Credentials never leave the training process: sentinel secrets planted in
the config, the hyperparameters, the command line, a logged text, the run info
and the environment are searched for in every file the run wrote (run
directory, MLflow's SQLite store, W&B's and Neptune's offline files) and in
what the process printed. The run happens in a child process so that its
environment (WANDB_API_KEY, ...) cannot leak into other tests' W&B service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rltrack.core.redact import REDACTED, Redactor

SENTINELS = {
    "config": "sentinel-config-7f3a9c",
    "hparams": "sentinel-hparams-51d2e0",
    "nested": "sentinel-nested-a93b11",
    "argv": "sentinel-argv-0c44d7",
    "info": "sentinel-info-e8a1f5",
    "environ": "sentinel-environ-2b9d6e",
}

CHILD = textwrap.dedent(
    """
    import sys
    import rltrack

    root, config_secret, hp_secret, nested_secret, info_secret, env_secret = sys.argv[1:7]
    sys.argv = ["train.py", "--lr", "0.1"] + sys.argv[7:]  # what meta.json records
    config = {
        "run": {"root": root, "name": "secret_run", "tracked": ["lr", "db_password"], "close_timeout": 120},
        "backends": {
            "use": ["local", "console", "tensorboard", "mlflow", "wandb", "neptune"],
            "mlflow": {"tags": {"auth_token": config_secret, "team": "rl"}},
            "wandb": {"project": "secrets"},
        },
    }
    with rltrack.make_logger(config) as log:
        log.log_hparams({"lr": 0.1, "db_password": hp_secret, "wandb": {"api_key": nested_secret, "project": "p"}})
        log.set_run_info({"session_token": info_secret, "trial": "t1"})
        for step in range(5):
            log.write({"loss": 1.0 / (step + 1)}, step=step, namespace="learner")
        log.log_text("note", "the key in the environment is " + env_secret, step=5)
        log.dump()
    print("run dir", log.run_dir)
    """
)


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "NEPTUNE_", "RLTRACK_", "MLFLOW_"))}
    env.update(
        HOME=str(home),
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(home / "wandb_config"),
        WANDB_CACHE_DIR=str(home / "wandb_cache"),
        WANDB_API_KEY=SENTINELS["environ"],
    )
    runs = root / "runs"
    argv = ["--api-key", SENTINELS["argv"]]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(runs), SENTINELS["config"], SENTINELS["hparams"], SENTINELS["nested"], SENTINELS["info"], SENTINELS["environ"], *argv],
        capture_output=True, text=True, timeout=300, cwd=root, env=env,
    )
    assert done.returncode == 0, done.stderr
    return root, runs / "secret_run", done.stdout + done.stderr


def test_no_sentinel_in_any_file_or_output(secret_run):
    root, run_dir, output = secret_run
    files = [p for p in root.rglob("*") if p.is_file()]
    names = {p.relative_to(root).as_posix() for p in files}
    # the run really reached every place searched below
    assert {"runs/mlflow.db", "runs/secret_run/journal.jsonl", "runs/secret_run/meta.json", "runs/secret_run/total_config.py"} <= names
    assert any(n.endswith(".wandb") for n in names) and any("data-" in n and ".neptune" in n for n in names)
    assert any("tfevents" in n for n in names)
    for name, secret in SENTINELS.items():
        assert secret not in output, f"{name} secret printed"
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{name} secret found in {path.relative_to(root)}"


def test_the_redacted_places_still_hold_everything_else(secret_run):
    _, run_dir, output = secret_run
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["argv"] == ["train.py", "--lr", "0.1", "--api-key", REDACTED]
    assert meta["tracked"] == {"lr": 0.1, "db_password": REDACTED}
    assert meta["info"] == {"session_token": REDACTED, "trial": "t1"}
    config = (run_dir / "total_config.py").read_text()
    assert "'team': 'rl'" in config and f"'auth_token': '{REDACTED}'" in config
    texts = [e.data for e in __import__("rltrack").read_journal(run_dir) if e.kind == "text"]
    assert {"note": f"the key in the environment is {REDACTED}"} in texts
    assert "learner" in output  # the console backend did print


def test_redactor_matches_credential_words_not_lookalikes():
    redactor = Redactor(["session[_-]?id"], environ={"MY_SERVICE_TOKEN": "tok-123456", "SHORT_TOKEN": "abc", "PATH": "/usr/bin"})
    secret_keys = ["api_key", "wandb.api-key", "AWS_SECRET_ACCESS_KEY", "db/password", "token", "Authorization_Token", "credentials", "sessionId"]
    plain_keys = ["tokenizer", "author", "max_tokens", "lr", "passage", "secretary_bird"]
    assert all(redactor.is_secret_key(k) for k in secret_keys)
    assert not any(redactor.is_secret_key(k) for k in plain_keys)
    assert redactor.mapping({"max_tokens": 512, "token": 7, "tokens": ["a"], "x": "tok-123456/abc"}) == {
        "max_tokens": 512, "token": 7, "tokens": ["a"], "x": f"{REDACTED}/abc"
    }
    assert redactor.argv(["-m", "train", "--password", "pw", "--session-id=42", "--lr=3"]) == [
        "-m", "train", "--password", REDACTED, f"--session-id={REDACTED}", "--lr=3"
    ]
