"""What a logging call of TorchRL, Tianshou and rsl_rl costs the training
thread with rltrack's logger (issue 35), beside the library's own TensorBoard
logger in the same process.

Per call, CPU time of the calling thread (`time.thread_time_ns`) over blocks
of calls, the two loggers alternating block by block so machine noise hits
both alike; the median block is reported:

  * TorchRL: `log_scalar(name, float, step)` of `RLTrackLogger` against
    TorchRL's `TensorboardLogger`;
  * rsl_rl: `add_scalar(tag, float, it)` of `RLTrackLogWriter` against the
    `torch.utils.tensorboard.SummaryWriter` rsl_rl uses by default;
  * Tianshou: `write("update/update_step", step, data)` with the 23 keys of
    its PPO update stats, `RLTrackLogger` against Tianshou's `TensorboardLogger`
    (only where Tianshou is installed: the oldest environment).

rltrack writes with the local backend (the agent writes the files); what the
pipeline thread and the agent do afterwards is not on the calling thread.

    python bench/bench_library_loggers.py            # about a minute
    python bench/bench_library_loggers.py --quick    # a few seconds
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUICK = "--quick" in sys.argv
BLOCKS, CALLS = (6, 500) if QUICK else (20, 2000)
UPDATE_KEYS = ["train_time", "gradient_steps"] + [f"{loss}/{stat}" for loss in ("loss", "actor_loss", "vf_loss", "ent_loss") for stat in ("mean", "std", "max", "min")]
UPDATE_KEYS += [f"smoothed_loss/{loss}" for loss in ("loss", "actor_loss", "vf_loss", "ent_loss", "gradient_steps")]


def config(root: Path) -> dict:
    """The local backend, runs under `root`."""
    return {"backends": {"use": ["local"]}, "run": {"root": str(root), "close_timeout": None}}


def per_call(calls: dict[str, Callable[[int], None]]) -> dict[str, float]:
    """Median CPU microseconds per call of each callable, blocks alternating."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    step = 0
    for block in range(BLOCKS):
        for name in (list(calls) if block % 2 == 0 else list(reversed(calls))):
            call = calls[name]
            start = time.thread_time_ns()
            for _ in range(CALLS):
                step += 1
                call(step)
            times[name].append((time.thread_time_ns() - start) / CALLS / 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def torchrl_case(root: Path) -> tuple[dict[str, float], Callable[[], None]]:
    from torchrl.record.loggers import TensorboardLogger

    from rltrack.adapters.torchrl import RLTrackLogger

    ours = RLTrackLogger("bench_torchrl", config=config(root))
    theirs = TensorboardLogger("bench", str(root / "tb_torchrl"))
    found = per_call({"TorchRL TensorboardLogger": lambda s: theirs.log_scalar("loss_objective", 0.5, step=s),
                      "rltrack RLTrackLogger": lambda s: ours.log_scalar("loss_objective", 0.5, step=s)})  # fmt: skip
    return found, lambda: (ours.close(), theirs.experiment.close())


def rsl_rl_case(root: Path) -> tuple[dict[str, float], Callable[[], None]]:
    from torch.utils.tensorboard import SummaryWriter

    from rltrack.adapters.rsl_rl import RLTrackLogWriter

    ours = RLTrackLogWriter(str(root / "bench_rsl_rl"), config(root))
    theirs = SummaryWriter(str(root / "tb_rsl_rl"), flush_secs=10)
    found = per_call({"rsl_rl's SummaryWriter": lambda s: theirs.add_scalar("Loss/value", 0.5, s),
                      "rltrack RLTrackLogWriter": lambda s: ours.add_scalar("Loss/value", 0.5, s)})  # fmt: skip
    return found, lambda: (ours.stop(), theirs.close())


def tianshou_case(root: Path) -> tuple[dict[str, float], Callable[[], None]]:
    from tianshou.utils.logger.tensorboard import TensorboardLogger
    from torch.utils.tensorboard import SummaryWriter

    from rltrack.adapters.tianshou import RLTrackLogger

    data = {key: 0.5 for key in UPDATE_KEYS}
    ours = RLTrackLogger(config(root))
    theirs = TensorboardLogger(SummaryWriter(str(root / "tb_tianshou")), write_flush=False)
    found = per_call({"Tianshou TensorboardLogger": lambda s: theirs.write("update/update_step", s, data),
                      "rltrack RLTrackLogger": lambda s: ours.write("update/update_step", s, data)})  # fmt: skip
    return found, lambda: (ours.finalize(), theirs.finalize())


def main() -> None:
    cases = {"torchrl": torchrl_case, "rsl_rl": rsl_rl_case, "tianshou": tianshou_case}
    print(f"CPU per call on the calling thread, median of {BLOCKS} blocks of {CALLS} calls")
    with tempfile.TemporaryDirectory() as tmp:
        for module, case in cases.items():
            if importlib.util.find_spec(module) is None:
                print(f"{module}: not installed here, skipped")
                continue
            found, close = case(Path(tmp) / module)
            close()
            for name, micros in found.items():
                print(f"{module:9} {name:28} {micros:8.1f} us")


if __name__ == "__main__":
    main()
