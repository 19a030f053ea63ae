"""Ray Tune's trial directories, read by `rltrack runs` where they lie:
`result.json` (one result per line, nested) and `params.json` (the trial's
config), as Tune writes them for every trial, with or without rltrack.

The declaration (`LIBRARY.folders`) names this reader; the run database
(rltrack.runs.readers_foreign) imports it when it looks for runs. Each result
is flattened with "/" and read as the callback reads it (rltrack.adapters.tune.keys:
the bookkeeping keys left out, `training_iteration` the `train_iter` axis,
the first env step counter the `env_steps` one, Tune's durations as
`timing`); the values keep their native names, with canonical twins through
the shared vocabulary. The source is "rllib" for an RLlib result. Status:
the trial's in the experiment's newest `experiment_state-*.json`, "failed"
when the trial left `error.txt`, "finished" when its last result is `done`;
its tracked hyperparameters are the state's `evaluated_params`, what the
search varied. Task: the experiment's folder name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rltrack.adapters.tune.keys import ENV_STEP_KEYS, ITERATION_KEY, RUN_INFO_KEYS, TIMING_KEYS, is_rllib_result
from rltrack.core.values import flatten
from rltrack.runs.readers_foreign import UNKNOWN, earliest_mtime, json_dict, namespace_and_key
from rltrack.runs.records import RunInfo, Sample, as_number, scalar_hparams, with_canonical


class TuneFormat:
    """A Ray Tune trial dir: `result.json` (JSON lines, nested results) and `params.json` (the trial's config)."""

    name = "tune"
    #: Tune's trial status (experiment_state-*.json) -> run status.
    STATUSES = {"TERMINATED": "finished", "ERROR": "failed", "RUNNING": "running", "PENDING": "pending", "PAUSED": "paused"}

    def detect(self, path: Path) -> bool:
        return (path / "result.json").is_file() and (path / "params.json").is_file()

    def info(self, path: Path) -> RunInfo:
        results = self._results(path)
        first = results[0] if results else {}
        last = results[-1] if results else {}
        config = json_dict(path / "params.json")
        hparams = scalar_hparams(config)
        state = self._trial_state(path)
        searched = state.get("evaluated_params")
        tracked = {k: v for k, v in hparams.items() if k in searched} if isinstance(searched, dict) else {}
        status = self.STATUSES.get(str(state.get("status")), UNKNOWN)
        if (path / "error.txt").is_file() or (path / "error.pkl").is_file():
            status = "failed"
        elif last.get("done"):
            status = "finished"
        start = as_number(first.get("timestamp"))
        start = start - (as_number(first.get("time_total_s")) or 0.0) if start is not None else earliest_mtime([path / "params.json"])
        return RunInfo(
            path, "rllib" if is_rllib_result(first) else self.name, self.name, path.parent.name,
            str(first.get("hostname") or UNKNOWN), str(first.get("node_ip") or ""), start, status, config, hparams, tracked,
        )

    def samples(self, path: Path) -> list[Sample]:
        samples: list[Sample] = []
        for result in self._results(path):
            flat = flatten({k: v for k, v in result.items() if k != "config" and k not in RUN_INFO_KEYS})
            steps: dict[str, int] = {}
            env_steps = next((v for k in ENV_STEP_KEYS if (v := as_number(flat.get(k))) is not None), None)
            if env_steps is not None:
                steps["env_steps"] = int(env_steps)
            iteration = as_number(flat.pop(ITERATION_KEY, None))
            if iteration is not None:
                steps["train_iter"] = int(iteration)
            when = as_number(result.get("timestamp"))
            for tag, raw in flat.items():
                value = as_number(raw) if not isinstance(raw, str) else None
                if value is not None:
                    namespace, key = namespace_and_key(tag)
                    samples.append(Sample(namespace, key, value, steps, when, "timing" if tag in TIMING_KEYS else "scalars"))
        return list(with_canonical(samples))

    def signature_files(self, path: Path) -> list[Path]:
        return [path / "params.json", path / "result.json", path / "error.txt", *self._state_files(path)[:1]]

    @staticmethod
    def _state_files(path: Path) -> list[Path]:
        """The experiment's state files beside the trial, newest first."""
        return sorted(path.parent.glob("experiment_state-*.json"), reverse=True)

    def _trial_state(self, path: Path) -> dict[str, Any]:
        """What Tune's newest experiment state says about this trial (status, the searched
        `evaluated_params`); {} when there is none (a trial dir copied on its own)."""
        for state_file in self._state_files(path):
            try:
                trials = json.loads(state_file.read_text(encoding="utf-8"))["trial_data"]
                for entry in trials:
                    trial = json.loads(entry[0]) if isinstance(entry[0], str) else entry[0]
                    if trial.get("relative_logdir") == path.name:
                        return trial
            except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
                continue
        return {}

    @staticmethod
    def _results(path: Path) -> list[dict[str, Any]]:
        results = []
        with (path / "result.json").open(encoding="utf-8") as f:
            for line in f:
                try:
                    result = json.loads(line)
                except ValueError:  # a line torn by a killed trial
                    continue
                if isinstance(result, dict):
                    results.append(result)
        return results


#: The reader `rltrack runs` uses (`LIBRARY.folders`).
FORMAT = TuneFormat()
