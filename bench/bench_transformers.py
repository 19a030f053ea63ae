"""What `RLTrackCallback` costs a transformers/TRL training run (issue 41):
TRL's `GRPOTrainer` on the 1-layer Qwen2 model built in code
(tests/helpers/tiny_lm.py), `logging_steps=1` (about 25 values a step, the
heaviest logging TRL does), with the callback (backends local, MLflow on a
SQLite file, W&B offline) against the same trainer without it.

Timed: `trainer.train()` alone, wall clock and this process's CPU (every
thread of it: the pipeline thread included; the agent is another process and
is not billed). Building the model and the trainer is outside the timed span;
opening the run (in `on_train_begin`) is inside. The two variants alternate,
the order rotated, `--repetitions` times after one untimed warm-up of each
(imports, the agent's start); the median and min-max are reported. Target:
≤ 1.03× wall and CPU.

    python bench/bench_transformers.py            # about 3 minutes
    python bench/bench_transformers.py --quick    # about a minute
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import trackers
from report import Section, arguments, verdict

TARGET = 1.03
BACKENDS = ["local", "mlflow", "wandb"]


def grpo(tmp: Path, steps: int, callbacks: list[Any], seed: int) -> Any:
    import tiny_lm
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    tok = tiny_lm.tokenizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = GRPOConfig(
            output_dir=str(tmp / f"out_{seed}"), per_device_train_batch_size=4, num_generations=4, max_completion_length=8, max_steps=steps,
            logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=seed, disable_tqdm=True,
        )  # fmt: skip
        return GRPOTrainer(model=tiny_lm.model(tok, seed), reward_funcs=tiny_lm.reward_length, args=args, callbacks=callbacks,
                           train_dataset=Dataset.from_dict({"prompt": tiny_lm.PROMPTS * (2 * steps)}), processing_class=tok)  # fmt: skip


def main() -> None:
    parser = arguments(__doc__ or "", "40 steps, 3 repetitions")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 150; --quick 40)")
    parser.add_argument("--repetitions", type=int, default=None, help="timed runs of each variant (default 7; --quick 3)")
    options = parser.parse_args()
    steps = options.steps or (40 if options.quick else 150)
    repetitions = options.repetitions or (3 if options.quick else 7)
    section = Section()
    from rltrack.adapters.transformers import RLTrackCallback

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        trackers.isolate(tmp)
        wall: dict[str, list[float]] = {"without rltrack": [], "RLTrackCallback": []}
        cpu: dict[str, list[float]] = {key: [] for key in wall}
        closes: list[float] = []
        for run in range(repetitions + 1):
            order = list(wall) if run % 2 == 0 else list(reversed(wall))
            for variant in order:
                callback = RLTrackCallback(trackers.config(tmp / "runs", f"grpo_{run}", BACKENDS, filters=False)) if variant != "without rltrack" else None
                trainer = grpo(tmp, steps, [callback] if callback else [], run)
                started, cpu_started = time.perf_counter(), time.process_time()
                with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):  # the Trainer prints each log without tqdm
                    trainer.train()
                elapsed, cpu_elapsed = time.perf_counter() - started, time.process_time() - cpu_started
                if callback is not None:
                    t0 = time.perf_counter()
                    if not callback.logger.close(timeout=None):
                        raise RuntimeError(f"{callback.logger.run_dir}: not everything delivered at close()")
                    closes.append(time.perf_counter() - t0)
                    if trackers.mlflow_count(callback.logger.run_dir, "train/loss") != steps:
                        raise RuntimeError(f"{callback.logger.run_dir}: MLflow does not hold the {steps} losses logged")
                if run:  # the first round warms up (imports, the agent's start)
                    wall[variant].append(elapsed)
                    cpu[variant].append(cpu_elapsed)

    def line(values: dict[str, list[float]], variant: str) -> str:
        return f"{statistics.median(values[variant]):.2f} s ({min(values[variant]):.2f}-{max(values[variant]):.2f})"

    ratio_wall = statistics.median(wall["RLTrackCallback"]) / statistics.median(wall["without rltrack"])
    ratio_cpu = statistics.median(cpu["RLTrackCallback"]) / statistics.median(cpu["without rltrack"])
    body = "\n".join([
        f"TRL `GRPOTrainer`, tiny Qwen2 (tests/helpers/tiny_lm.py), {steps} steps, `logging_steps=1`; "
        f"rltrack: `RLTrackCallback`, backends {', '.join(BACKENDS)}, no filters. Median (min-max) of {repetitions} runs each, alternating.",
        "",
        "| variant | `trainer.train()` wall | this process's CPU |",
        "|---|---|---|",
        *(f"| {variant} | {line(wall, variant)} | {line(cpu, variant)} |" for variant in wall),
        "",
        verdict("wall, with / without", f"{ratio_wall:.3f}x", f"<= {TARGET}x", ratio_wall <= TARGET),
        verdict("CPU, with / without", f"{ratio_cpu:.3f}x", f"<= {TARGET}x", ratio_cpu <= TARGET),
        f"- `close()` until every tracker had the run: median {statistics.median(closes):.2f} s (not in the timed span)",
    ])  # fmt: skip
    section.finish("bench_transformers: RLTrackCallback beside the same GRPOTrainer run without it", body, write=not options.no_write)


if __name__ == "__main__":
    main()
