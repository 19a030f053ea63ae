"""`import rltrack` must not import any heavy optional package.

Why: rltrack is imported by every training script, including ones that use
none of the trackers or frameworks; torch, mlflow, wandb, neptune, ray,
stable_baselines3 and tensorboard each take from hundreds of milliseconds to
seconds to import, so they are imported lazily by the module that needs them.
The check runs in a fresh interpreter, because this test process has long
imported them all. The time `import rltrack` takes is measured by
`bench/bench_import.py`, not here (timings in tests are flaky).
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "mlflow", "wandb", "neptune", "ray", "stable_baselines3", "tensorboard", "tensorboardX", "acme", "pandas", "matplotlib", "pyarrow")


def modules_after(statement: str) -> set[str]:
    """Top-level module names in sys.modules after running `statement` in a fresh interpreter."""
    code = f"import sys, json; {statement}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_rltrack_imports_no_heavy_package() -> None:
    loaded = modules_after("import rltrack")
    assert "rltrack" in loaded
    assert sorted(loaded.intersection(HEAVY)) == []


def test_making_a_local_logger_imports_no_heavy_package(tmp_path) -> None:
    statement = (
        f"import rltrack; log = rltrack.make_logger(run={{'root': {str(tmp_path)!r}, 'name': 'r'}}, backends={{'use': ['local']}}); "
        "log.write({'x': 1.0}, step=1); log.close()"
    )
    assert sorted(modules_after(statement).intersection(HEAVY)) == []


def test_the_probe_sees_what_a_statement_imports() -> None:
    """The probe itself works: a module appears only when the statement imports it."""
    assert "wave" not in modules_after("pass")
    assert "wave" in modules_after("import wave")
