"""Run by Python at start-up in every process `rltrack run` starts (its
directory is first on PYTHONPATH): attaches rltrack to the process's
TensorBoard writers (rltrack.cli.run_child), then runs the `sitecustomize`
the user had, if any, as Python would have without rltrack."""

import importlib
import os
import sys


def _attach() -> None:
    try:
        from rltrack.cli.run_child import attach_from_environment

        attach_from_environment()
    except Exception as exc:  # noqa: BLE001 - a Python without rltrack, a broken config: the script still runs
        print(f"rltrack run: not attached in {sys.executable} ({type(exc).__name__}: {exc})", file=sys.stderr)


def _chain_users_sitecustomize() -> None:
    """Imports the next `sitecustomize` on sys.path (the user's), in this one's place."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    own = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if own is not None:
            sys.modules["sitecustomize"] = own
    finally:
        sys.path[:] = saved


_attach()
_chain_users_sitecustomize()
