"""The adapter classes on a library's own base class are built on first
access (rltrack.adapters.on_access): reading the registered libraries, which
imports every adapter module that declares one, imports no library; the
class is a real subclass of the library's base, built once even when two
threads ask at once, pickled by reference; a library that is missing is
named with its extra when the class is asked for, not at import."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from rltrack import MissingExtraError
from rltrack.adapters.on_access import subclass_on_access

#: The adapters whose class is built on its library's base, and that base.
BUILT = {
    "rltrack.adapters.torchrl": ("RLTrackLogger", "torchrl"),
    "rltrack.adapters.tianshou": ("RLTrackLogger", "tianshou"),
    "rltrack.adapters.transformers": ("RLTrackCallback", "transformers"),
    "rltrack.adapters.rl_games": ("RLTrackObserver", "rl_games"),
    "rltrack.adapters.rsl_rl": ("RLTrackLogWriter", "rsl_rl"),
    "rltrack.adapters.tune.callback": ("RLTrackCallback", "ray"),  # `from rltrack.adapters.tune import RLTrackCallback` hands it on
}


#: What reading the declarations must not import: those libraries, the others whose adapters declare one
#: (SB3, Acme and its JAX, SpinningUp's torch), and rltrack's run database (a library's folder reader is
#: imported only when `rltrack runs` looks for runs).
NOT_IMPORTED = sorted({lib for _, lib in BUILT.values()} | {"stable_baselines3", "torch", "acme", "jax", "spinup", "rltrack.runs"})


def test_reading_the_registered_libraries_imports_no_library():
    code = (
        "import sys\n"
        "from rltrack.frameworks.library import libraries\n"
        "libraries()\n"
        f"print(sorted(m for m in {NOT_IMPORTED!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]", done.stdout


#: In a fresh process: four threads ask for the class at once; the class, its place, its base and its pickling.
BUILD_ONCE = """
import pickle, sys, threading, importlib
module, name, library = sys.argv[1:]
adapter = importlib.import_module(module)
found = []
threads = [threading.Thread(target=lambda: found.append(getattr(adapter, name))) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
built = getattr(adapter, name)
print(len(found), len({id(cls) for cls in found}), found[0] is built, built.__module__, built.__qualname__,
      built.__mro__[2].__module__.split(".")[0], pickle.loads(pickle.dumps(built)) is built)
"""


@pytest.mark.parametrize("module", sorted(BUILT))
def test_the_class_is_built_once_on_the_library_base_and_pickles_by_reference(module):
    name, library = BUILT[module]
    pytest.importorskip(library, reason=f"{module} needs {library}")
    done = subprocess.run([sys.executable, "-c", BUILD_ONCE, module, name, library], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # four asked, one class, stored in the module, named there, the behaviour then the library's own base, pickled by reference
    assert done.stdout.split() == ["4", "1", "True", module, name, library, "True"]


def test_a_missing_library_is_named_with_its_extra_when_the_class_is_asked_for():
    module = types.ModuleType("rltrack_test_on_access")
    sys.modules[module.__name__] = module
    try:
        module.__getattr__ = subclass_on_access(module.__name__, "Logger", object, "no_such_library.loggers:Base", "nosuch")
        with pytest.raises(MissingExtraError, match=r"rltrack\[nosuch\]"):
            module.Logger  # noqa: B018
        with pytest.raises(AttributeError):
            module.Other  # noqa: B018
    finally:
        del sys.modules[module.__name__]
