"""SpinningUp -> rltrack: a drop-in `EpochLogger` that also sends every row to rltrack.

Replace `from spinup.utils.logx import EpochLogger` with
`from rltrack.adapters.spinup import EpochLogger`; nothing else changes:

    logger = EpochLogger(output_dir="data/vpg/vpg_s0", exp_name="vpg")
    logger.save_config(locals())
    logger.setup_pytorch_saver(ac)
    for epoch in range(epochs):
        ...  logger.store(EpRet=ep_ret, EpLen=ep_len)
        logger.save_state({"env": env}, None)
        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * steps_per_epoch)
        logger.log_tabular("LossPi", average_only=True)
        logger.dump_tabular()

Files and output are SpinningUp's (`spinup/utils/logx.py`): `output_dir`
defaults to `/tmp/experiments/<unix time>`; `progress.txt` (tab-separated,
header row first, then one `str(value)` per cell, an empty cell for a key not
logged that epoch), `config.json` (same JSON layout, with `exp_name`),
`vars.pkl` / `vars<itr>.pkl` (joblib, or pickle when joblib is missing) and
`pyt_save/model.pt` / `model<itr>.pt` (`torch.save` of what
`setup_pytorch_saver` was given); the same coloured messages and the same
`| key | value |` table at each `dump_tabular()`.

Where this logger differs from SpinningUp's, on purpose:

* A key that first appears after the first row does not crash (SpinningUp
  asserts). It is appended to the header, and `progress.txt` is rewritten once
  with the wider header: earlier rows get an empty cell for the new column
  (pandas reads it as NaN). Later rows are appended as usual.
* `log_tabular(key)` for a key with nothing stored this epoch (e.g. no test
  episode finished) logs NaN for its statistics and warns once, instead of
  raising IndexError/KeyError.
* Statistics are computed in float64 with numpy (mean, std with ddof=0, min,
  max); SpinningUp uses float32 buffers for MPI, so its figures differ after
  about the 7th significant digit. The values written to `progress.txt` are
  exactly the values sent to rltrack (`str` of a float64 reads back exactly).
* No MPI: this logger runs in one process (SpinningUp's PyTorch algorithms
  with `cpu=1`). TF1 saving (`setup_tf_saver`) is not supported.

What rltrack receives, once per `dump_tabular()`:

* step axes: `TotalEnvInteracts` -> `env_steps` (primary), `Epoch` -> `epoch`
  (rows with neither are numbered on the axis `step`); these two columns are
  sent as axes, not as metrics;
* every column under its SpinningUp name as written (`AverageEpRet`), filed
  in the local run directory under its stage: `EpRet*`, `EpLen*` columns ->
  `collector`; `TestEp*` -> `evaluator`; `Time` -> `time` as a `timing`
  (seconds); every other column -> `learner`; beside it canonical names from
  `CANONICAL` per the config's `run.names` (`collector/reward_mean`, ...). Columns made by `log_tabular(key)` from
  stored values are sent in events marked `preaggregated`;
* DI-engine's stage blocks (`collector`, `evaluator`, `learner`), computed
  from the raw values `store`d this epoch, as `rows` tells;
  no blocks with `run.names = "native"`;
* `save_config(config)` -> `log_hparams`, without what is no hyperparameter
  (the logger object, `logger_kwargs`, output paths: rltrack.frameworks.hparams); `save_state` -> `log_checkpoint` of
  the object given to `setup_pytorch_saver` (iteration = `itr`, or the number of
  rows dumped so far, which is the current epoch in SpinningUp's loops).

Which rltrack Logger: `rltrack_logger=` (yours; this class never closes it), or
one made from `rltrack_config=` (a path, dict or None, as `rltrack.make_logger`
takes; None means `RLTRACK_CONFIG` or the defaults). A run made here lives under
the config's `run.root` (default `./runs`, next to every other rltrack run, so
`rltrack` commands and run indexes find it); unless the config names it, the
run is named after `output_dir`'s last component (`vpg_s0` with SpinningUp's
`setup_logger_kwargs`), else `exp_name`, else `spinup`; its task (the
experiment its seeds share) is `exp_name` unless the config names one. Its `meta.json` info
records `output_dir` and `exp_name`, and its path is printed after SpinningUp's
"Logging data to" line. It is closed by `close()` or at interpreter exit.
`send_to_rltrack=False` makes a plain SpinningUp logger.

This package is all rltrack knows of SpinningUp, a module per job: `logger`
(the drop-in `EpochLogger`), `logx` (SpinningUp's own helpers, reproduced),
`rows` (its columns, their canonical names, and the events and stage blocks
a row becomes), `folders` (SpinningUp's output dirs, for `rltrack runs`); and
here, its public names and its declaration (`LIBRARY`, registered in the
entry-point group `rltrack.libraries`). `EpochLogger` and `convert_json`
(numpy, rltrack's training side) are imported on first use, so that reading
the declaration imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltrack.adapters.spinup.rows import CANONICAL, LEARNER_LOSSES
from rltrack.adapters.on_access import names_on_access
from rltrack.frameworks.library import Library

if TYPE_CHECKING:
    from rltrack.adapters.spinup.logger import EpochLogger, convert_json
    from rltrack.adapters.spinup.logx import colorize, epoch_statistics

#: SpinningUp's `EpochLogger`; its output dirs read by `rltrack runs`.
LIBRARY = Library(adapter=True, canonical=CANONICAL, folders="rltrack.adapters.spinup.folders:FORMAT")


#: The logger's names, imported on first use (`from rltrack.adapters.spinup import EpochLogger`).
__getattr__ = names_on_access(
    __name__,
    {**dict.fromkeys(("EpochLogger", "convert_json"), "rltrack.adapters.spinup.logger"), **dict.fromkeys(("colorize", "epoch_statistics"), "rltrack.adapters.spinup.logx")},
)

__all__ = ["CANONICAL", "LEARNER_LOSSES", "LIBRARY", "EpochLogger", "colorize", "convert_json", "epoch_statistics"]
