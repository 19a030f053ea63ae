"""Stable-Baselines3 -> rltrack: a `KVWriter` next to SB3's own outputs, and a callback.

    import rltrack
    from rltrack.adapters.sb3 import RLTrackCallback, attach

    logger = rltrack.make_logger(run={"name": "cartpole_ppo"})
    model = PPO("MlpPolicy", "CartPole-v1")
    attach(model, logger)                       # SB3's stdout/csv/tensorboard stay as they were
    eval_cb = EvalCallback(eval_env, callback_on_new_best=RLTrackCallback(logger))
    model.learn(10_000, callback=[RLTrackCallback(logger, save_freq=2_000), eval_cb])
    logger.close()

What arrives in rltrack, per `Logger.dump(step)` of SB3:

* One `Event` per namespace (per namespace and kind), `source="sb3"`. The
  training thread copies the values (arrays too, since SB3 may reuse them)
  and hands them over with `Logger.emit_deferred`; routing keys to
  namespaces and names, and converting numpy scalars, arrays and strings,
  happen on rltrack's pipeline thread.
* Step axes: `env_steps` = the `step` SB3 passes (its `num_timesteps`), and
  `train_iter` = rollout-and-update rounds for on-policy algorithms (PPO,
  A2C: `num_timesteps // (n_steps * n_envs)`, which is `time/iterations` in
  a first `learn()` call) or `train/n_updates` for off-policy ones (DQN,
  SAC, TD3: gradient steps). One source is used for the whole run:
  `attach`/`RLTrackCallback` pick it from the model's class; a writer built
  by hand takes the first of the two keys it sees (`time/iterations` if both
  come together) as it is. The last known `train_iter` is carried into later dumps
  that lack it (e.g. the dump `EvalCallback` makes), so every event has both
  axes once training began.
* Across `learn()` calls and `PPO.load`: `env_steps` is SB3's
  `num_timesteps`, so it carries on with `reset_num_timesteps=False` and
  after a load, and restarts where SB3's own records restart
  (`reset_num_timesteps=True`, SB3's default, with a new TensorBoard
  directory); the collector block's totals follow it. `train_iter` carries
  on as well (SB3's `time/iterations` restarts at 1 in every call);
  off-policy `n_updates` never restarts, not even with `reset_num_timesteps=True`.
* Each SB3 dump ends with `Logger.dump(steps)`, rltrack's store-then-log
  point: aggregating filters emit, the console and text logs print a table.
* Every key as SB3 wrote it: `rollout/ep_rew_mean` is namespace `rollout`,
  key `ep_rew_mean`; keys without a prefix get namespace `""`. The local run
  directory files each under its stage (`rollout/` -> `collector`, `eval/`
  -> `evaluator`, `train/` -> `learner`, `time/` -> `time`: the event's
  `stage`). Under `time/`,
  durations (keys named like `*_time`, `*elapsed*`, `*duration*`, `*_sec`,
  `*_seconds`) are sent as kind `timing`; `time_elapsed` (a running clock,
  not a duration), `fps`, `iterations`, `total_timesteps`, `episodes` stay `scalars`.
* `rollout/` values are SB3's moving means over the last `stats_window_size`
  episodes, so the events holding them carry `preaggregated=True`.
* Canonical names (`CANONICAL`) per `run.names` in the config: "both"
  (default) sends `rollout/ep_rew_mean` *and* `collector/reward_mean`.
* `key_excluded`: this writer's format name is `"rltrack"` (`FORMAT_NAME`).
  A key recorded with `exclude="rltrack"` (or a tuple containing it), or with
  an exclusion naming every SB3 format (`stdout`, `log`, `json`, `csv`,
  `tensorboard`), is not sent. SB3's own `exclude="tensorboard"` (used for
  `time/total_timesteps`, `train/n_updates`, ...) does not stop it.
* SB3's typed values become rltrack kinds instead of being dropped:
  `Image` and `Figure` -> kind `image`, `Video` -> kind `video`, `HParam` ->
  kind `hparams` (its `hparam_dict`; the names in `metric_dict`, which only
  wire TensorBoard's HParams tab to scalar tags, go to the run's meta.json
  `info["sb3_hparam_metrics"]`). Images and videos are encoded with Pillow
  (a matplotlib dependency, so present wherever SB3 is) into
  `<run_dir>/media/<namespace>/<key>_<step>.png` (videos as animated PNG),
  and the event's data is JSON: `{key: {"path": "media/...", "format": "png" |
  "apng", "width", "height", "channels", ["frames", "fps"]}}` with `path`
  relative to the run directory. This encoding runs on the calling thread,
  as it does in SB3's own TensorBoard format (a matplotlib figure must be
  rendered there anyway); scalars never pay it. A value that cannot be
  encoded is counted in report.json (section "sb3") rather than raised.

`RLTrackCallback` records hyperparameters at the start of `learn()` and
forwards checkpoints to `Logger.log_checkpoint` (see its docstring). With
`stages=True` (default) it also sends DI-engine's collector, learner and
buffer blocks at each of SB3's own dumps and an evaluator block per
`EvalCallback` evaluation (`stages`), SB3's own dump of that
evaluation in the same table; SB3's keys then keep their native names, the
canonical ones coming from the blocks (with `run.names = "canonical"`, SB3's
keys that have a canonical name are not sent).

SB3 is imported only when `RLTrackWriter`, `RLTrackCallback` or `attach` is
first used, so this package (and its `CANONICAL` table) imports without it.

This package is all rltrack knows of SB3, a module per job: `callback` (the
callback, `attach`, `add_writer`), `writer` (the `KVWriter`'s body), `media`
(SB3's typed values), `stages` (DI-engine's blocks from a live model),
`checkpoints` (an algorithm's `train_iter`, DI-engine's checkpoints of a
model), `keys` (what SB3's keys mean), `hparams` (a model's hyperparameters),
`folders` (SB3's own run folders, for `rltrack runs`); and here, its public
names and its declaration (`LIBRARY`, registered in the entry-point group
`rltrack.libraries`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrack.adapters.sb3.callback import __getattr__, add_writer, attach, record_hparams
from rltrack.adapters.sb3.checkpoints import axis_options, di_checkpoint
from rltrack.adapters.sb3.hparams import model_hparams
from rltrack.adapters.sb3.keys import CANONICAL, FORMAT_NAME, NAMESPACES, stored_key
from rltrack.frameworks.library import Library
from rltrack.frameworks.stages import STEP_AXIS

if TYPE_CHECKING:
    from rltrack.adapters.sb3.callback import RLTrackCallback, RLTrackWriter

#: SB3's logger (its own TensorBoard format too): `<prefix>/<key>` at `num_timesteps`;
#: its own folders (`progress.csv`) read by `rltrack runs`.
LIBRARY = Library(
    packages=("stable_baselines3",),
    adapter=True,
    stages={prefix: (stage, STEP_AXIS) for prefix, stage in NAMESPACES.items()},
    canonical=CANONICAL,
    axis=STEP_AXIS,
    stored={stored_key(native): canonical for native, canonical in CANONICAL.items()},
    folders="rltrack.adapters.sb3.folders:FORMAT",
)

__all__ = [
    "CANONICAL", "FORMAT_NAME", "LIBRARY", "NAMESPACES", "RLTrackCallback", "RLTrackWriter", "add_writer", "attach", "axis_options",
    "di_checkpoint", "model_hparams", "record_hparams",
]  # fmt: skip
