"""The package's layers: every module imports only from its own layer or below, and no two modules import each other in a circle.

The layers are the table in docs/ARCHITECTURE.md, one folder (package) each, read from there.

Why: a newcomer reads the package from the bottom up, and a change low down
cannot be broken by a module above it. The walk reads every module's source
with `ast` (nothing is imported): imports at the top, inside functions and
under `if TYPE_CHECKING:` all count, and so does a string that is nothing but
the name of one of the package's modules (`"rltrack.sinks.local:LocalBackend"`,
`"rltrack.runs.plot"`): such names are imported with `importlib` later. `from package import name` counts as importing the
submodule `package.name` when there is one, else the package itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "rltrack"
ARCHITECTURE = PACKAGE_DIR.parent / "docs" / "ARCHITECTURE.md"


def read_layers() -> dict[str, int]:
    """Package -> layer, from the layer table in docs/ARCHITECTURE.md: the one copy.

    A row is `| <layer> | `core/`, ... | <job> |`; `rltrack/__init__.py` is the facade.
    A module takes the layer of the package it sits in (its longest matching prefix)."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for layer, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M):
        for entry in re.findall(r"`([^`]+)`", cell):
            assert entry.endswith("/") or entry == "rltrack/__init__.py", f"docs/ARCHITECTURE.md, layer {layer}: {entry!r} is neither a folder nor the facade"
            layers["rltrack." + entry.rstrip("/").replace("/", ".") if entry.endswith("/") else "rltrack"] = int(layer)
    assert layers, "no layer table under '## Layers' in docs/ARCHITECTURE.md"
    return layers


#: Package -> layer, from the bottom.
LAYERS: dict[str, int] = read_layers()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}
#: A string naming a module of the package, optionally with `:attribute`.
MODULE_STRING = re.compile(r"rltrack(\.\w+)+(:\w+)?")


def layer_of(module: str) -> int:
    # the facade, `rltrack`, is no folder: it holds no module but itself
    prefixes = [p for p in LAYERS if module == p or (p != "rltrack" and module.startswith(p + "."))]
    assert prefixes, f"{module} is in no layer: put it in a layer's folder, or add its folder to the layer table in docs/ARCHITECTURE.md"
    return LAYERS[max(prefixes, key=len)]


def known_module(name: str) -> str:
    """`name` or the nearest enclosing module of the package that exists."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str) -> set[str]:
    """The package's modules that `module` imports anywhere in its source."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    run_as_main: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".") if is_package else module.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
            names = submodules if len(submodules) == len(node.names) else [base, *submodules]
        elif isinstance(node, (ast.List, ast.Tuple)):  # `python -m rltrack.agent.process` starts a process, it imports nothing
            run_as_main.update(id(b) for a, b in zip(node.elts, node.elts[1:]) if isinstance(a, ast.Constant) and a.value == "-m")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in run_as_main:
            name = node.value.partition(":")[0]
            names = [name] if MODULE_STRING.fullmatch(node.value) and name in MODULES else []
        for name in names:
            if name == "rltrack" or name.startswith("rltrack."):
                target = known_module(name)
                if target != module:
                    found.add(target)
    return found


def entry_point_modules(group: str) -> set[str]:
    """The package's modules that pyproject.toml registers in the entry-point
    `group`: the module that reads the group imports them."""
    import tomllib

    project = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text())["project"]
    return {known_module(value.partition(":")[0]) for value in project["entry-points"][group].values()}


GRAPH: dict[str, set[str]] = {module: imports_of(module) for module in MODULES}
GRAPH["rltrack.delivery.registry"] |= entry_point_modules("rltrack.trackers")


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    circles: list[str] = []
    state: dict[str, str] = {}  # "open" while on the stack, "done" after
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == "open":
                cycle = [*stack[stack.index(target) :], target]
                circles.append(" -> ".join(f"{m} (layer {layer_of(m)})" for m in cycle))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert circles == [], "import circles:\n" + "\n".join(circles)


def test_the_walk_sees_imports_inside_functions_type_checking_blocks_and_module_names() -> None:
    """The probe itself works: the facade names its public modules in strings and
    under TYPE_CHECKING, the CLI imports the agent inside a function, the
    registry imports the backends pyproject.toml registers as entry points."""
    assert {"rltrack.training.config", "rltrack.training.logger", "rltrack.journal"} <= GRAPH["rltrack"]
    assert "rltrack.agent.process" in GRAPH["rltrack.cli.entry"]
    assert "rltrack.trackers.mlflow.backend" in GRAPH["rltrack.delivery.registry"]
