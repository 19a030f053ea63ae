"""One offline run written with the real neptune 1.x client, for the Neptune
importer's tests (tests/runs/test_neptune_import.py) and the Neptune-to-Trackio
rescue (tests/backends/test_trackio_backend.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BASE = 1_700_000_000.0


def write_offline_run(tmp_path: Path) -> None:
    import neptune
    from neptune.types import File

    run = neptune.init_run(
        mode="offline", name="rescued", tags=["ppo", "cartpole"], capture_stdout=False, capture_stderr=False,
        capture_hardware_metrics=False, capture_traceback=False, git_ref=False, source_files=[],
    )
    run["parameters"] = {"lr": 0.01, "net": {"layers": 3, "act": "relu"}, "use_gae": True}
    run["config/env"] = "CartPole-v1"
    run["config/remove_me"] = 1
    del run["config/remove_me"]
    for i in range(300):
        run["train/loss"].append(1.0 / (i + 1), step=i, timestamp=BASE + i)
        if i % 10 == 0:
            run["eval/reward"].append(float(i), step=i * 100, timestamp=BASE + i + 0.5)
    run["train/lr"].extend([0.01, 0.005, 0.001], steps=[0, 100, 200], timestamps=[BASE, BASE + 100, BASE + 200])
    run["unstepped"].append(5.0, timestamp=BASE + 1)
    run["unstepped"].append(6.0, timestamp=BASE + 2)
    run["scratch"].append(1.0, step=0)
    run["scratch"].clear()
    run["scratch"].append(2.0, step=0)
    run["notes"].append("first note", step=1, timestamp=BASE + 3)
    run["eval/frames"].append(File.as_image(np.full((4, 4, 3), 128, dtype=np.uint8)), step=3, timestamp=BASE + 4)
    (tmp_path / "weights.bin").write_bytes(b"checkpoint bytes")
    run["checkpoints/iteration_5"].upload(str(tmp_path / "weights.bin"))
    run["report"].upload(File.from_content(b"in memory", extension="txt"))
    run.stop()
