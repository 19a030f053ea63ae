"""Ray Tune / RLlib -> rltrack: one rltrack run per Tune trial, and RLlib result dicts as events.

Two ways in:

    # 1. a Tune callback: one run directory (and tracker run) per trial
    from rltrack.adapters.tune import RLTrackCallback
    tune.run(trainable, config=..., callbacks=[RLTrackCallback("rltrack.toml")])
    tune.Tuner(trainable, run_config=tune.RunConfig(callbacks=[RLTrackCallback()])).fit()

    # 2. a plain RLlib loop, no Tune
    logger = rltrack.make_logger(run={"name": "ppo_cartpole"})
    for _ in range(n):
        log_result(logger, algo.train())

`RLTrackCallback(config=None, **overrides)` takes what `rltrack.make_logger`
takes (a config path or dict, then whole-section overrides such as
`run={"names": "canonical"}`); the config is read and validated when the
callback is built, so a mistake fails before Tune starts. Each trial gets its
own Logger, made when the trial starts and closed when it ends:

* directory: `<run.root>/<experiment>/<trial name>_<experiment tag>`, where
  `<experiment>` is Tune's experiment directory name (`tune.run(name=...)`,
  `RunConfig(name=...)`, or Tune's generated one) unless `run.name` is set in
  the config, in which case `run.name` names that folder instead;
* task (the experiment in the run index and in every tracker: MLflow
  experiment, W&B project and group, trackio project, Neptune tag): Tune's
  experiment name, unless `run.task` is set; the run is named after the
  trial, so the trials of a sweep are runs of one experiment everywhere;
* a trial restarted by `Tuner.restore` continues its own run (the directory
  whose `meta.json` holds its trial id, resumed as `make_logger(resume=...)`
  does: the same tracker runs, steps and journal), instead of starting a
  second one;
* storage (`run.storage`, see docs/storage.md): the run is mirrored under
  `<storage>/<experiment>/`, `<storage>` being `run.storage`, else Tune's own
  `storage_path` (`s3://...`, `gs://...`, a shared directory) unless it is
  Tune's default `~/ray_results` on this machine; `storage = false` turns it off;
* hyperparameters: the trial's config (`log_hparams`), again if a scheduler
  such as PBT changes it;
* `meta.json` "info": `framework`, `trial_id`, `trial_name`, `experiment`,
  `experiment_tag`, `trainable_name`, `trial_path` (where Tune keeps the
  trial, a URI with its scheme for remote storage) and, from each result, Tune's bookkeeping keys (`RUN_INFO_KEYS`);
* status: "finished" when the trial completes, "failed" when it errors,
  "killed" for trials still open when the experiment ends (interrupted runs).

What one result dict becomes (the same for both ways in: bookkeeping keys to
`meta.json`, `config` to the hyperparameters, `training_iteration` and the env
step counters to the step axes, every other key a metric under its native
name, DI-engine's stage blocks beside them per `run.names`, source "rllib" or
"tune") is told in full in rltrack.adapters.tune.results, which does that
work; the key names and the canonical vocabulary are in
rltrack.adapters.tune.keys.

Individual episodes: RLlib's results hold only aggregates. Add the RLlib
callback `record_episodes` to the algorithm config
(`config.callbacks(on_episode_end=record_episodes)`): it logs each finished
episode's return and length to RLlib's own metrics as an `item_series`, which
RLlib hands over once per iteration under `env_runners/rltrack/` (and
`evaluation/env_runners/rltrack/`), from every env runner; the blocks are then
computed from those episodes.

The calling thread (Tune's driver loop, or your training loop) takes the
bookkeeping, `config` and steps out of a shallow copy of the result and hands
the copy to the logger's pipeline thread, where its events and blocks are
built; do not change the result's nested dicts, lists and arrays after handing
it over (Tune and RLlib build a new result every iteration).

Ray need not be installed to import this package. `RLTrackCallback` must be a
real subclass of `ray.tune.logger.LoggerCallback` (Tune calls the `on_trial_*`
hooks that base class defines, which route to `log_trial_*`; users and Tune
tell callbacks apart with `isinstance`), and that base class exists only when
Ray does, so the class is
built on first access (rltrack.adapters.on_access): `from
rltrack.adapters.tune import RLTrackCallback` imports Ray then, and raises
`rltrack.MissingExtraError` naming the `tune` extra when Ray is missing; it
pickles by reference (Tuner pickles its callbacks).
The behaviour lives in the plain class `TrialLoggers`, which needs no Ray.

This package is all rltrack knows of Tune and RLlib, a module per job:
`callback` (`RLTrackCallback`, `log_result`, `record_episodes`), `results`
(what one result dict becomes), `keys` (the bookkeeping keys, the step axes,
the canonical vocabulary), `folders` (Tune's trial directories, for `rltrack
runs`); and here, its public names and its declaration (`LIBRARY`,
registered in the entry-point group `rltrack.libraries`). The callback's
names (which import rltrack's training side) are imported on first use, so
that reading the declaration does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrack.adapters.tune.keys import CANONICAL, ENV_STEP_KEYS, ITERATION_KEY, RUN_INFO_KEYS, TIMING_KEYS, canonical_name, is_rllib_result
from rltrack.adapters.on_access import names_on_access
from rltrack.frameworks.library import Library

if TYPE_CHECKING:
    from rltrack.adapters.tune.callback import RLTrackCallback, TrialLoggers, log_result, record_episodes

#: Ray Tune and RLlib, through result dicts; Tune's trial directories read by `rltrack runs`.
LIBRARY = Library(adapter=True, canonical=CANONICAL, folders="rltrack.adapters.tune.folders:FORMAT")


#: The callback's names, imported on first use (`from rltrack.adapters.tune import RLTrackCallback`:
#: that class is built on Ray's base then, rltrack.adapters.tune.callback).
__getattr__ = names_on_access(__name__, dict.fromkeys(("RLTrackCallback", "TrialLoggers", "log_result", "record_episodes"), "rltrack.adapters.tune.callback"))

__all__ = [
    "CANONICAL",
    "ENV_STEP_KEYS",
    "ITERATION_KEY",
    "LIBRARY",
    "RUN_INFO_KEYS",
    "TIMING_KEYS",
    "RLTrackCallback",
    "TrialLoggers",
    "canonical_name",
    "is_rllib_result",
    "log_result",
    "record_episodes",
]
