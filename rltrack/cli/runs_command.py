"""`rltrack runs ...` and `rltrack export`: the experiment database from a shell.

    rltrack runs ls [--root R] [--task T] [--where EXPR] [--sort [-]COL,...] [--all] [--columns C,...] [--json]
    rltrack runs show RUN [--root R] [--json]
    rltrack runs rm PATTERN [--root R] [--yes]          regex over run ids; lists what would go unless --yes
    rltrack runs archive PATTERN [--root R] [--yes]     moves runs into <root>/archive/ (still indexed, archived=1)
    rltrack runs index [--root R] [--rebuild]           brings the index up to date, or rebuilds it
    rltrack export RUN... [--root R] --format csv|parquet [-o DIR]

A root that is a storage URI (`--root s3://bucket/prefix`, see docs/storage.md)
is pulled into the user's cache first (rltrack.runs.storage_root) and read
there, its index beside it; rm and archive refuse one (they act on a local root).

`add_commands` registers them on the `rltrack` parser; each sets `handler`.
Every command refreshes the index first (only runs whose files changed are
re-read). rm and archive never touch anything outside the root: each run's
path is resolved and must lie inside the resolved root, and a run directory
that is a symlink is refused.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from rltrack.core.storage import refuse_uri_as_path
from rltrack.runs.index import ARCHIVE_DIR, RUN_COLUMNS, connect, rebuild, refresh, resolve
from rltrack.runs.query import QueryError, field_names, select
from rltrack.runs.run import MAIN_METRICS, open_run

DEFAULT_ROOT = Path("runs")


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    runs = commands.add_parser("runs", help="the experiment database: list, show, remove, archive, index runs")
    sub = runs.add_subparsers(dest="runs_command", required=True)

    ls = sub.add_parser("ls", help="list indexed runs (a table, or --json)")
    _root(ls)
    ls.add_argument("--task", help="only this task (glob patterns like 'cartpole*' allowed)")
    ls.add_argument("--where", help="a condition over index columns, e.g. \"lr<0.01 and env_id=='CartPole-v1'\"")
    ls.add_argument("--sort", help="columns, '-' for descending, e.g. -best/evaluator/reward_mean")
    ls.add_argument("--all", action="store_true", help="include archived runs")
    ls.add_argument("--columns", help="comma-separated columns to show after the id (default: status, source, main metrics)")
    _json(ls)
    ls.set_defaults(handler=cmd_ls)

    show = sub.add_parser("show", help="one run: config, hyperparameters, metrics summary, files, delivery status")
    show.add_argument("run", help="a run directory, a run folder under --root, or a run id (or its unique beginning)")
    _root(show)
    _json(show)
    show.set_defaults(handler=cmd_show)

    for name, verb in (("rm", "delete"), ("archive", f"move into <root>/{ARCHIVE_DIR}/")):
        command = sub.add_parser(name, help=f"{verb} the runs whose id matches a regex (dry run unless --yes)")
        command.add_argument("pattern", help="a regular expression searched in each run id")
        _root(command, writes=True)
        command.add_argument("--yes", action="store_true", help="act; without it, only list what would be affected")
        _json(command)
        command.set_defaults(handler=cmd_rm if name == "rm" else cmd_archive)

    index = sub.add_parser("index", help="bring the index up to date (or rebuild it from the run directories)")
    _root(index)
    index.add_argument("--rebuild", action="store_true", help="throw the index away and build it from scratch")
    _json(index)
    index.set_defaults(handler=cmd_index)

    export = commands.add_parser("export", help="write runs' values as tidy tables (csv or parquet)")
    export.add_argument("runs", nargs="+", metavar="RUN", help="run directories, run folders under --root, or run ids")
    _root(export)
    export.add_argument("--format", choices=["csv", "parquet"], default="csv", help="file format (default csv)")
    export.add_argument("-o", "--out", type=Path, default=Path("."), help="directory for the files (default: .)")
    export.set_defaults(handler=cmd_export)


#: Options whose value may begin with "-" (`--sort -best/evaluator/reward_mean`), which argparse would take for an option.
_DASH_VALUE_OPTIONS = ("--sort",)


def dash_values(argv: list[str]) -> list[str]:
    """`--sort -x` -> `--sort=-x`, so a descending sort can be written as the issue shows it."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in _DASH_VALUE_OPTIONS and arg.startswith("-") and not arg.startswith("--"):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _root(parser: argparse.ArgumentParser, writes: bool = False) -> None:
    parser.add_argument(
        "--root", type=local_root_argument if writes else root_argument, default=DEFAULT_ROOT,
        help="the runs root holding the index (default: runs)" + ("" if writes else "; a storage URI such as s3://bucket/prefix is read from storage"),
    )  # fmt: skip


def root_argument(text: str) -> Path:
    """A `--root` to read runs from: a directory, or a storage URI pulled into the user's cache (rltrack.runs.storage_root)."""
    from rltrack.runs.storage_root import PullError, local_root

    try:
        root = local_root(text)
    except (PullError, ImportError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if str(root) != text:
        print(f"rltrack: the runs in {text}, read from a copy in {root}", file=sys.stderr)
    return root


def local_root_argument(text: str) -> Path:
    """A `--root` that is written to: a local directory, never a URI turned into a folder named `s3:`."""
    try:
        refuse_uri_as_path(text, "--root", "this command changes a local root; read storage with `rltrack runs ls --root URI`, copy it with `rltrack pull URI DIR`")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return Path(text)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable JSON instead of a table")


# ---- output ---------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain aligned text table with a header line."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), indent=2))


def _fail(command: str, message: str) -> int:
    print(f"rltrack {command}: {message}", file=sys.stderr)
    return 2


# ---- commands ---------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    refresh(args.root)
    try:
        with closing(connect(args.root)) as db:
            names, found = select(db, args.where, args.task, args.sort, None if args.all else False)
            known = field_names(db) | set(RUN_COLUMNS)
    except QueryError as exc:
        return _fail("runs ls", str(exc))
    if args.json:
        _print_json(found)
        return 0
    if args.columns:
        columns = ["id", *[c.strip() for c in args.columns.split(",") if c.strip()]]
        unknown = [c for c in columns if c not in known]
        if unknown:
            return _fail("runs ls", f"no run has the column(s) {', '.join(map(repr, unknown))}; the indexed runs have: {', '.join(sorted(known))}")
    else:
        metrics = [m for m in MAIN_METRICS if m in names and m != "collector/total_envstep_count"]
        addressed_by_path = ["path"] if any(row.get("writer") != "rltrack" for row in found) else []  # runs written without rltrack
        columns = ["id", *addressed_by_path, "status", "source", *(["archived"] if args.all else []), *metrics]
    print(render_table(found, columns))
    print(f"{len(found)} run(s) under {args.root}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        run = open_run(resolve(args.root, args.run))
    except (LookupError, ValueError) as exc:
        return _fail("runs show", str(exc))
    details = {
        "id": run.id,
        "path": str(run.path),
        "task": run.task,
        "start_time": run.start_time.isoformat(),
        "host": run.host,
        "ip": run.ip,
        "status": run.status,
        "source": run.source,
        "writer": run.writer,
        "config": run.config,
        "hparams": run.hparams,
        "metrics": run.summary,
        "timelog": {stage: {"count": len(d), "total_s": sum(d)} for stage, d in run.timelog.items()},
        "files": _files(run.path),
        "checkpoints": [str(p.relative_to(run.path)) for p in run.checkpoints],
        "delivery": delivery_status(run.path, run.info.backends),
    }
    if args.json:
        _print_json(details)
        return 0
    for key in ("id", "path", "task", "start_time", "host", "ip", "status", "source", "writer"):
        print(f"{key:<11} {details[key]}")
    print("\nconfig:\n" + json.dumps(_jsonable(run.config), indent=2, default=str))
    if run.hparams:
        print("\nhyperparameters:\n" + render_table([{"name": k, "value": v} for k, v in run.hparams.items()], ["name", "value"]))
    summary = [{"key": k, **v} for k, v in run.summary.items()]
    print("\nmetrics:\n" + render_table(summary, ["key", "count", "final_step", "final", "best"]))
    if details["timelog"]:
        print("\nstage timings:\n" + render_table([{"stage": s, **v} for s, v in details["timelog"].items()], ["stage", "count", "total_s"]))
    print("\nfiles:\n" + render_table(details["files"], ["file", "bytes"]))
    if details["delivery"]:
        print("\ndelivery:\n" + render_table(details["delivery"], ["tracker", "delivered_events", "pending_bytes", "state"]))
    return 0


def _files(run_dir: Path) -> list[dict[str, Any]]:
    """Every file of the run, relative, with its size (directories of many files are summed)."""
    out = []
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out.append({"file": str(path.relative_to(run_dir)), "bytes": path.stat().st_size})
    return out


def delivery_status(run_dir: Path, backends: list[str]) -> list[dict[str, Any]]:
    """For each remote tracker the run used: events delivered, journal bytes pending (from `cursors/`)."""
    from rltrack.delivery.registry import RemoteBackend, backend_class, backend_types
    from rltrack.delivery.cursor import Cursor, pending_bytes

    out = []
    for name in backends:
        if name not in backend_types() or not issubclass(backend_class(name), RemoteBackend):
            continue
        pending = pending_bytes(run_dir, name)
        out.append({
            "tracker": name,
            "delivered_events": Cursor(run_dir, name).delivered,
            "pending_bytes": pending,
            "state": "up to date" if pending == 0 else f"behind: run `rltrack sync {run_dir}`",
        })
    return out


def _matching(root: Path, pattern: str, skip_archived: bool) -> list[dict[str, Any]]:
    regex = re.compile(pattern)
    refresh(root)
    with closing(connect(root)) as db:
        _, found = select(db, archived=False if skip_archived else None)
    return [row for row in found if regex.search(row["id"])]


def inside_root(root: Path, relative: str) -> Path:
    """The run's path, checked: not a symlink, resolving strictly inside `root`."""
    path = root / relative
    real_root = root.resolve()
    if path.is_symlink():
        raise ValueError(f"{path} is a symlink; rltrack only removes or moves real directories under {real_root}")
    real = path.resolve()
    if real == real_root or real_root not in real.parents:
        raise ValueError(f"{path} resolves to {real}, outside {real_root}; refused")
    return real


def _act(args: argparse.Namespace, command: str, skip_archived: bool, action: Any) -> int:
    try:
        rows = _matching(args.root, args.pattern, skip_archived)
    except re.error as exc:
        return _fail(command, f"pattern {args.pattern!r} is not a regular expression ({exc}); e.g. '^cartpole/2026/05/'")
    done, refused = [], []
    for row in rows:
        try:
            path = inside_root(args.root, row["path"])
            if args.yes:
                action(path, row)
        except (ValueError, OSError) as exc:
            refused.append({"id": row["id"], "path": row["path"], "reason": str(exc)})
            continue
        done.append({"id": row["id"], "path": row["path"]})
    if args.json:
        _print_json({"dry_run": not args.yes, "runs": done, "refused": refused})
    else:
        past = {"runs rm": "removed", "runs archive": "archived"}[command]
        verb = past if args.yes else f"would be {past}"
        for row in done:
            print(f"{verb}: {row['id']}  ({row['path']})")
        for row in refused:
            print(f"refused: {row['id']}: {row['reason']}", file=sys.stderr)
        if not args.yes and done:
            print(f"{len(done)} run(s); add --yes to act", file=sys.stderr)
        if not rows:
            print(f"no run id matches {args.pattern!r}", file=sys.stderr)
    return 1 if refused else 0


def cmd_rm(args: argparse.Namespace) -> int:
    def remove(path: Path, row: dict[str, Any]) -> None:
        shutil.rmtree(path)
        with closing(connect(args.root)) as db, db:
            db.execute("DELETE FROM runs WHERE path = ?", (row["path"],))

    return _act(args, "runs rm", False, remove)


def cmd_archive(args: argparse.Namespace) -> int:
    def archive(path: Path, row: dict[str, Any]) -> None:
        target = args.root.resolve() / ARCHIVE_DIR / row["path"]
        if target.exists():
            raise ValueError(f"{target} already exists; rename or remove it first")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target))
        with closing(connect(args.root)) as db, db:
            db.execute("UPDATE runs SET path = ?, archived = 1 WHERE path = ?", (f"{ARCHIVE_DIR}/{row['path']}", row["path"]))

    return _act(args, "runs archive", True, archive)


def cmd_index(args: argparse.Namespace) -> int:
    counts = rebuild(args.root) if args.rebuild else refresh(args.root)
    if args.json:
        _print_json(counts)
    else:
        print(", ".join(f"{n} {what}" for what, n in counts.items()))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rltrack.runs.export import export_run

    for ref in args.runs:
        try:
            target = export_run(open_run(resolve(args.root, ref)), args.out, args.format)
        except (LookupError, ValueError) as exc:
            return _fail("export", str(exc))
        except ImportError as exc:
            return _fail("export", f"{args.format} needs a package that is missing ({exc}); install the extra: pip install 'rltrack[runs]'")
        print(target)
    return 0
