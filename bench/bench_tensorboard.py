"""What `rltrack.adapters.tensorboard.attach` adds to each `add_scalar` (issue 34).

Per `add_scalar(tag, float, step)` on the calling thread (perf_counter_ns),
the same writer timed without and with rltrack attached, in one process:

  * torch `SummaryWriter`        - TensorBoard's `EventFileWriter` (the proto
                                   serialised on the calling thread, a queue to
                                   its writer thread);
  * tensorboardX `SummaryWriter` - its `EventFileWriter` (a 10-slot
                                   multiprocessing queue to its writer thread).

"attached" is `attach(logger)` with the local backend: the hook runs the
writer's own `add_event`, then hands the proto over (`Logger.emit_deferred`,
a deque append); translation, journal and files happen on rltrack's threads
and in the agent. The hook is class-level, so the states alternate per
block (attach, time a block, detach and flush, time a plain block, ...), the
order rotated each round so machine noise hits both alike. The goal: the
hook's added cost under 10% of what `add_scalar` itself costs.

Beside it, what the pipeline thread pays per value: `Translator.add` on
protos made by the same writers (not on the calling thread).

    python bench/bench_tensorboard.py            # about a minute
    python bench/bench_tensorboard.py --quick    # a few seconds
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rltrack  # noqa: E402
from rltrack.adapters import tensorboard  # noqa: E402
from rltrack.frameworks.tensorboard import Translator  # noqa: E402
from report import Section, arguments  # noqa: E402  (bench/ is sys.path[0])
from timing import percentile, ratio_table, summary, time_calls  # noqa: E402

TAGS = ["charts/episodic_return", "charts/episodic_length", "losses/value_loss", "losses/policy_loss", "charts/SPS"]


def writers(logdir: Path) -> dict[str, Any]:
    from tensorboardX import SummaryWriter as XWriter
    from torch.utils.tensorboard import SummaryWriter

    return {"torch SummaryWriter": SummaryWriter(str(logdir / "torch")), "tensorboardX SummaryWriter": XWriter(str(logdir / "tbx"))}


def measure(writer: Any, logger: rltrack.Logger, rounds: int, per_block: int, warmup: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """`add_scalar` timed in blocks, plain and attached alternating: per-call
    wall-clock summaries, and the median over blocks of the calling thread's
    CPU time per call (`time.thread_time_ns`: what other processes on a busy
    machine take is not in it)."""
    step = [0]

    def call(_: Any) -> None:
        i = step[0] = step[0] + 1
        writer.add_scalar(TAGS[i % len(TAGS)], i * 0.001, i)

    states: dict[str, Callable[[], None]] = {"plain": tensorboard.detach, "attached": lambda: tensorboard.attach(logger)}
    items = [None] * per_block
    for enter in states.values():  # warm both paths up
        enter()
        time_calls(call, items[:warmup], [])
    samples: dict[str, list[int]] = {name: [] for name in states}
    medians: dict[str, list[float]] = {name: [] for name in states}
    cpu_per_call: dict[str, list[float]] = {name: [] for name in states}
    names = list(states)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            states[name]()
            gc.collect()
            block: list[int] = []
            cpu = time.thread_time_ns()
            time_calls(call, items, block)
            cpu_per_call[name].append((time.thread_time_ns() - cpu) / per_block / 1000)
            tensorboard.detach()
            writer.flush()
            logger.flush(timeout=120)
            samples[name] += block
            medians[name].append(percentile(sorted(block), 50))
    return {name: summary(samples[name], medians[name]) for name in names}, {name: statistics.median(v) for name, v in cpu_per_call.items()}


def translation_cost(logdir: Path, n: int) -> float:
    """µs per `Translator.add` on protos a real torch writer made (the pipeline thread's share)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from torch.utils.tensorboard.summary import scalar

    protos = [Event(wall_time=time.time(), step=i, summary=scalar(TAGS[i % len(TAGS)], i * 0.001)) for i in range(n)]
    translator = Translator(run="bench")
    start = time.perf_counter()
    for proto in protos:
        translator.add(proto, str(logdir))
    translator.flush()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = arguments(__doc__ or "", "3 rounds of 1,000 calls per state and writer")
    args = parser.parse_args()
    rounds, per_block, warmup = (3, 1000, 200) if args.quick else (9, 4000, 1000)
    section = Section()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logger = rltrack.make_logger({"run": {"root": str(root / "runs"), "name": "bench"}, "backends": {"use": ["local"]}})
        lines = []
        verdicts = []
        for name, writer in writers(root / "tb").items():
            results, cpu = measure(writer, logger, rounds, per_block, warmup)
            writer.close()
            plain, attached = results["plain"]["median"], results["attached"]["median"]
            lines += [f"### {name}.add_scalar (wall clock per call)", "", ratio_table(results, "plain", per="state", unit="plain"), ""]
            verdicts.append(f"- {name}: `add_scalar` CPU {cpu['plain']:.1f} µs plain, {cpu['attached']:.1f} µs attached: the hook adds "
                            f"**{cpu['attached'] - cpu['plain']:.2f} µs = {(cpu['attached'] - cpu['plain']) / cpu['plain']:.1%}** "
                            f"(goal < 10%); wall-clock medians {plain:.1f} vs {attached:.1f} µs ({attached / plain - 1:+.1%})")  # fmt: skip
        tensorboard.detach()
        translation = translation_cost(root / "tb" / "torch", 20_000 if not args.quick else 2_000)
        logger.close(timeout=60)
    body = "\n".join([
        *verdicts,
        f"- off the calling thread: `Translator.add` {translation:.1f} µs per scalar proto (the pipeline thread)",
        "",
        *lines,
    ])  # fmt: skip
    section.finish("TensorBoard hook: added cost per add_scalar (issue 34)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
