"""Calling-thread cost of the Acme and SpinningUp adapters, beside the native paths.

Acme (per `write` of one 10-value record as an Acme actor/learner writes it:
numpy scalars, a growing `actor_steps`):

  * bare capture      - append a copy of the dict to a list: the floor;
  * RLTrackLogger     - `rltrack.adapters.acme.RLTrackLogger.write` into a Logger
                        with no filters and the local backend (every record reaches
                        the journal, tfevents, csv and text log on the pipeline thread);
  * Acme CSV          - `CSVLogger` inside `NoneFilter` and `TimeFilter`, time_delta 0
                        (every record written: the reference) and 0.5 s (most dropped);
  * tee               - `tee(Acme CSV None+Time 0, RLTrackLogger)`: Acme's chain plus ours.

SpinningUp (per epoch of a VPG-like loop: 1,000 `store(VVals=...)`, 40
`store(EpRet=..., EpLen=...)`, one `store` of 6 losses, then 14 `log_tabular`
calls -> 21 columns and one `dump_tabular()`):

  * `store` alone (per call; identical code with or without rltrack);
  * `log_tabular` x 14 + `dump_tabular` (per epoch), with rltrack (local backend)
    and without it. SpinningUp itself is not on PyPI and cannot be imported here,
    so the baseline is this EpochLogger with `send_to_rltrack=False`, which runs
    SpinningUp's code path (numpy statistics, the printed table, one appended
    line of progress.txt); SpinningUp's MPI reductions (mpi4py) are not in it.
    The table goes to /dev/null in both, so terminal speed is not measured.

Systems alternate in rounds so machine noise hits all of them alike; between
blocks each is settled untimed (rltrack `flush()`), so no background backlog is
billed to the next block. The pipeline thread hardly runs during a timed block
(they last milliseconds), as in bench_write.py; read that script's "pipeline
busy" row for what GIL sharing adds.

    python bench/bench_acme_spinup.py            # about 30 s of CPU (longer on a loaded machine)
    python bench/bench_acme_spinup.py --quick    # about 5 s of CPU
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
if importlib.util.find_spec("launchpad") is None:
    # `import acme` imports launchpad (no wheels for Python >= 3.11); this is the
    # clearly marked no-op STAND-IN from tests/helpers/standins, not the real package.
    sys.path.insert(0, str(REPO / "tests" / "helpers" / "standins"))

import rltrack  # noqa: E402
from rltrack.adapters.acme import RLTrackLogger, tee  # noqa: E402
from rltrack.adapters.spinup import EpochLogger  # noqa: E402
from report import Section, arguments  # noqa: E402  (bench/ is sys.path[0])
from timing import System, percentile, ratio_table, run_rounds, summary, time_calls  # noqa: E402



def acme_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """n records of 10 values as Acme loops and learners write them (numpy scalars)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append({
            "episode_return": np.float32(rng.normal(100, 10)), "episode_length": np.int64(200 + i % 7),
            "steps_per_second": np.float64(rng.uniform(1e3, 2e3)), "actor_episodes": np.int64(i + 1),
            "actor_steps": np.int64(200 * (i + 1)), "learner_steps": np.int64(i), "loss": np.float32(rng.random()),
            "critic_loss": np.float32(rng.random()), "policy_loss": np.float32(rng.random()), "learner_walltime": float(i),
        })  # fmt: skip
    return out


def rltrack_config(root: Path, name: str) -> dict[str, Any]:
    return {"run": {"root": str(root), "name": name}, "backends": {"use": ["local"]}}


def acme_csv(tmp: Path, name: str, time_delta: float) -> Any:
    from acme.utils.loggers import CSVLogger, NoneFilter, TimeFilter

    return TimeFilter(NoneFilter(CSVLogger(str(tmp / name), label="actor", add_uid=False)), time_delta)


def acme_systems(tmp: Path) -> dict[str, System]:
    captured: list[dict[str, Any]] = []
    ours_logger = rltrack.make_logger(rltrack_config(tmp, "acme_ours"))
    ours = RLTrackLogger(ours_logger, "actor", "actor_steps")
    csv0 = acme_csv(tmp, "csv0", 0.0)
    csv05 = acme_csv(tmp, "csv05", 0.5)
    tee_logger = rltrack.make_logger(rltrack_config(tmp, "acme_tee"))
    both = tee(acme_csv(tmp, "csv_tee", 0.0), RLTrackLogger(tee_logger, "actor", "actor_steps"))
    nothing = lambda: None  # noqa: E731
    return {
        "bare capture (floor)": (lambda rec: captured.append(dict(rec)), captured.clear, captured.clear),
        "RLTrackLogger.write (local backend)": (ours.write, ours_logger.flush, ours_logger.close),
        "Acme CSVLogger, None+Time 0 s (all written)": (csv0.write, nothing, csv0.close),
        "Acme CSVLogger, None+Time 0.5 s": (csv05.write, nothing, csv05.close),
        "tee(Acme CSV None+Time 0 s, RLTrackLogger)": (both.write, tee_logger.flush, lambda: (both.close(), tee_logger.close())),
    }


# ---- SpinningUp ------------------------------------------------------------

LOSSES = ("LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL")


def fill_epoch(logger: EpochLogger, rng: np.random.Generator) -> None:
    for _ in range(1000):
        logger.store(VVals=float(rng.normal()))
    for _ in range(40):
        logger.store(EpRet=float(rng.normal(100, 10)), EpLen=int(rng.integers(10, 50)))
    logger.store(**{key: float(rng.normal()) for key in LOSSES})


def log_epoch(logger: EpochLogger, epoch: int) -> None:
    logger.log_tabular("Epoch", epoch)
    logger.log_tabular("EpRet", with_min_and_max=True)
    logger.log_tabular("EpLen", average_only=True)
    logger.log_tabular("VVals", with_min_and_max=True)
    logger.log_tabular("TotalEnvInteracts", (epoch + 1) * 1000)
    for key in LOSSES:
        logger.log_tabular(key, average_only=True)
    logger.log_tabular("Time", 0.1 * epoch)
    logger.dump_tabular()


def spinup_bench(tmp: Path, epochs: int, rounds: int) -> dict[str, dict[str, float]]:
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        ours = EpochLogger(str(tmp / "spinup_ours"), rltrack_config=rltrack_config(tmp, "spinup_ours"))
        plain = EpochLogger(str(tmp / "spinup_plain"), send_to_rltrack=False)
        rng = np.random.default_rng(0)
        store_samples: list[int] = []
        value = [0.0]

        def store_call(_: Any) -> None:
            plain.store(VVals=value[0])

        time_calls(store_call, list(range(20_000)), store_samples)
        plain.epoch_dict.clear()
        samples: dict[str, list[int]] = {"with": [], "without": []}
        medians: dict[str, list[float]] = {"with": [], "without": []}
        loggers = {"with": ours, "without": plain}
        epoch = {"with": 0, "without": 0}
        per_round = max(1, epochs // rounds)
        for r in range(rounds):
            for name in (("with", "without") if r % 2 == 0 else ("without", "with")):
                logger = loggers[name]
                block: list[int] = []
                for _ in range(per_round):
                    fill_epoch(logger, rng)  # untimed: store() is measured on its own above
                    gc.collect()
                    t0 = time.perf_counter_ns()
                    log_epoch(logger, epoch[name])
                    block.append(time.perf_counter_ns() - t0)
                    epoch[name] += 1
                if logger.rltrack is not None:
                    logger.rltrack.flush()
                samples[name] += block
                medians[name].append(percentile(sorted(block), 50))
        ours.close()
        plain.close()
    return {
        "EpochLogger.store (per call; same code with or without rltrack)": summary(store_samples, [percentile(sorted(store_samples), 50)]),
        "log_tabular x14 + dump_tabular, rltrack disabled (SpinningUp-equivalent baseline)": summary(samples["without"], medians["without"]),
        "log_tabular x14 + dump_tabular, sending to rltrack (local backend)": summary(samples["with"], medians["with"]),
    }


def main() -> None:
    parser = arguments(__doc__, "2,000 records, 40 epochs")
    parser.add_argument("--records", type=int, default=10_000, help="timed Acme writes per system")
    parser.add_argument("--epochs", type=int, default=200, help="timed SpinningUp epochs per variant")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.quick:
        args.records, args.epochs = 2_000, 40
    section = Section()
    with tempfile.TemporaryDirectory(prefix="rltrack-bench-") as tmp_name:
        tmp = Path(tmp_name)
        warmup = 500
        acme_results = run_rounds(acme_systems(tmp), acme_records(args.records + warmup), args.rounds, warmup)
        spinup_results = spinup_bench(tmp, args.epochs, args.rounds)
    ref = "Acme CSVLogger, None+Time 0 s (all written)"
    extra = spinup_results["log_tabular x14 + dump_tabular, sending to rltrack (local backend)"]["median"] - \
        spinup_results["log_tabular x14 + dump_tabular, rltrack disabled (SpinningUp-equivalent baseline)"]["median"]
    ours = acme_results["RLTrackLogger.write (local backend)"]["median"]
    body = "\n".join([
        f"Acme: {args.records:,} timed `write`s of a 10-value record (numpy scalars) per system, {args.rounds} alternating rounds.",
        "",
        ratio_table(acme_results, ref, unit="Acme CSV"),
        "",
        f"SpinningUp: {args.epochs} timed epochs per variant (21 columns per row), {args.rounds} alternating rounds; "
        "SpinningUp is not importable here, so the baseline is rltrack's EpochLogger with `send_to_rltrack=False` "
        "(SpinningUp's code path without MPI); the printed table goes to /dev/null.",
        "",
        ratio_table(spinup_results, "log_tabular x14 + dump_tabular, rltrack disabled (SpinningUp-equivalent baseline)", unit="baseline"),
        "",
        f"- Acme: RLTrackLogger.write median {ours:.1f} µs vs Acme's CSV logger {acme_results[ref]['median']:.1f} µs "
        f"({acme_results[ref]['median'] / ours:.1f}× cheaper); tee adds ~{acme_results['tee(Acme CSV None+Time 0 s, RLTrackLogger)']['median'] - acme_results[ref]['median']:.1f} µs to Acme's chain.",
        f"- SpinningUp: sending each row to rltrack adds ~{extra:.0f} µs per epoch (median) to log_tabular+dump_tabular; store() is untouched.",
    ])  # fmt: skip
    section.finish("bench_acme_spinup: Acme and SpinningUp adapters, calling-thread cost", body, write=not args.no_write)


if __name__ == "__main__":
    main()
