"""Every `[backends.<name>]` table is checked, in `use` or not (issue 42).

A misspelled key in the table of a backend that is not in `backends.use`
(`[backends.wandb] projekt = "x"`) was accepted and failed only the day the
backend was switched on. Now it fails `make_logger` and `rltrack run` with
the key, the value and the fix, before a run directory is made. What only
the machine can tell (the tracker's package installed, credentials) is
checked for the backends in `use` alone: a table kept for another machine
does not fail here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from reliability_helpers import PYTHON, child_env

from rltrack.training.config import ConfigError, make_logger


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"wandb": {"projekt": "x"}}, ["backends.wandb", "unknown key 'projekt' (= 'x')", "Did you mean 'project'?"]),
        ({"mlflow": {"experimnet": "e"}}, ["backends.mlflow", "unknown key 'experimnet' (= 'e')", "Did you mean 'experiment'?"]),
        ({"mlflow": {"in_flight": 99}}, ["backends.mlflow", "in_flight = 99 must be a whole number from 1 to 32", "e.g. in_flight = 4"]),
        ({"trackio": {"server_url": "ftp://x"}}, ["backends.trackio", "server_url = 'ftp://x' must be an http(s) URL"]),
        ({"neptune": {"mode": "ofline"}}, ["backends.neptune", "mode = 'ofline' is not a Neptune mode"]),
        ({"tensorboard": {"logdri": "tb"}}, ["backends.tensorboard", "unknown key 'logdri' (= 'tb')", "Did you mean 'logdir'?"]),
        ({"storage": {"evry": 5}}, ["backends.storage", "unknown key 'evry' (= 5)", "Did you mean 'every'?"]),
    ],
)
def test_a_mistake_in_the_table_of_a_backend_not_in_use_fails_make_logger(tmp_path: Path, table: dict, says: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        make_logger({"run": {"root": str(tmp_path / "runs")}, "backends": {"use": ["memory"], **table}})
    for part in says:
        assert part in str(caught.value), f"{part!r} not in: {caught.value}"
    assert not (tmp_path / "runs").exists()  # before a run directory is made


def test_a_table_kept_for_another_machine_is_not_refused_for_this_ones_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a W&B key
    monkeypatch.delenv("NEPTUNE_API_TOKEN", raising=False)
    config = {"run": {"root": str(tmp_path / "runs"), "name": "r"}, "backends": {"use": ["memory"], "wandb": {"mode": "online"}, "neptune": {"mode": "async"}}}
    make_logger(config).close()
    with pytest.raises(ConfigError, match="needs a W&B API key"):  # in use, it is checked
        make_logger({**config, "backends": {**config["backends"], "use": ["memory", "wandb"]}})


def test_rltrack_run_refuses_it_before_the_command_starts(tmp_path: Path) -> None:
    (tmp_path / "rltrack.toml").write_text('[backends]\nuse = ["local"]\n\n[backends.wandb]\nprojekt = "x"\n')
    done = subprocess.run([PYTHON, "-m", "rltrack.cli", "run", "--config", "rltrack.toml", "--", PYTHON, "-c", "print('ran')"],
                          capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "ran" not in done.stdout
    assert "backends.wandb: unknown key 'projekt' (= 'x')" in done.stderr and "Did you mean 'project'?" in done.stderr, done.stderr
