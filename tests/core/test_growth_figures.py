"""The figures docs/ARCHITECTURE.md gives for what a library and a tracker
cost to add (issue 43 item 6), computed from the tree: the files of
`rltrack/` each registered library's and tracker's code lives in, and the
members of the tracker contract (`RemoteBackend`). The table in the docs is
the one this test prints (`python tests/core/test_growth_figures.py`); a change
that moves a library's or a tracker's code changes the figures, and the docs with them."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from rltrack.delivery.registry import GROUP as TRACKERS
from rltrack.frameworks.library import GROUP as LIBRARIES
from rltrack.trackers.remote import RemoteBackend

#: The checkout's package (the suite may import the installed wheel, whose files are the same).
PACKAGE = Path(__file__).resolve().parents[2] / "rltrack"
ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"
BEGIN, END = "<!-- growth figures: tests/core/test_growth_figures.py -->", "<!-- end of growth figures -->"


def _own(group: str) -> dict[str, str]:
    return {entry.name: entry.value.partition(":")[0] for entry in entry_points(group=group) if entry.value.startswith("rltrack.")}


def _file(module: str) -> Path:
    """The file of `module` (`rltrack.a.b`), relative to the package."""
    path = Path(*module.split(".")[1:])
    return path / "__init__.py" if (PACKAGE / path).is_dir() else path.with_suffix(".py")


def library_files(name: str, module: str) -> list[str]:
    """Its declaration's module, or, when that is a package's `__init__.py`
    (`adapters/<name>/`), every module of the package, the `__init__.py`
    included (it holds the public names and the declaration): a library
    package is counted by its files, not as one; and the modules named after
    it in frameworks/ and adapters/."""
    declaration = _file(module)
    if declaration.name == "__init__.py":
        found = {path.relative_to(PACKAGE) for path in (PACKAGE / declaration.parent).glob("*.py")}
    else:
        found = {declaration}
    for folder in ("frameworks", "adapters"):
        found |= {path.relative_to(PACKAGE) for path in (PACKAGE / folder).glob(f"{name}.py")}
        found |= {path.relative_to(PACKAGE) for path in (PACKAGE / folder).glob(f"{name}_*.py")}
    return sorted(str(path) for path in found)


def tracker_files(module: str) -> list[str]:
    """Its module, or every module of the package of its own it lives in (its `__init__.py` only names it)."""
    path = _file(module)
    if path.parent.name in ("trackers", "sinks"):
        return [str(path)]
    return sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / path.parent).glob("*.py") if p.name != "__init__.py")


def where(files: list[str]) -> str:
    """The files as the table shows them: the modules of a package of their
    own as the package and their names (`adapters/sb3/` (`callback`, ...))."""
    folders: dict[str, list[str]] = {}
    for file in files:
        folder, _, name = file.rpartition("/")
        folders.setdefault(folder, []).append(name)
    shown = []
    for folder, names in folders.items():
        if "/" in folder:
            modules = ", ".join(f"`{name.removesuffix('.py')}`" for name in names)
            shown.append(f"`{folder}/` ({modules})")
        else:
            shown += [f"`{folder}/{name}`" for name in names]
    return ", ".join(shown)


def contract_members() -> list[str]:
    return [name for name in vars(RemoteBackend) if not name.startswith("__")]


def table() -> str:
    rows = ["| kind | name | files | where |", "|---|---|---:|---|"]
    for name, module in sorted(_own(LIBRARIES).items()):
        files = library_files(name, module)
        rows.append(f"| library | {name} | {len(files)} | {where(files)} |")
    for name, module in sorted(_own(TRACKERS).items()):
        if module.startswith("rltrack.trackers."):
            files = tracker_files(module)
            rows.append(f"| tracker | {name} | {len(files)} | {where(files)} |")
    members = contract_members()
    return "\n".join(rows) + f"\n\nThe tracker contract (`RemoteBackend`): {len(members)} members ({', '.join(f'`{m}`' for m in members)})."


def test_the_architecture_page_gives_the_figures_of_the_tree():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"docs/ARCHITECTURE.md lacks the figures between {BEGIN} and {END}"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == table(), "docs/ARCHITECTURE.md's growth figures differ from the tree: paste `python tests/core/test_growth_figures.py`"


if __name__ == "__main__":
    print(table())
