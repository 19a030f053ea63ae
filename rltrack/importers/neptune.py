"""Rescue: Neptune 1.x offline and async folders turned into rltrack run directories.

Why it exists: hosted Neptune shut down in March 2026, and users still hold
what the 1.x client queued on disk: `.neptune/offline/run__<id>__<pid>__<key>/`
from offline mode, and `.neptune/async/...` with whatever an async run had not
uploaded yet. No server takes them any more. This module reads them (without
the neptune package: a rescue tool must work where the client is gone) and
writes each run through the normal rltrack machinery, so `rltrack sync RUN
--to mlflow` (or wandb) can deliver it.

The client's queue: `data-<first version>.log` files in each folder, one JSON
operation per line, `{"obj": {"type": "LogFloats", "path": ["ns", "key"],
"values": [{"value": 1.0, "step": 3.0, "ts": 1700000000.0}]}, "version": 7,
"at": 1700000000.1}`; `metadata.json` beside them names the container. Older
clients nested execution folders (`async/run__<id>/exec-<time>/`); all the
folders of one container become one run, in the order they were written.

What becomes what:

* `LogFloats` -> scalars, `LogStrings` -> text, `LogImages` -> image files in
  `media/` and image events; each value at its own step (axis `step`) and
  timestamp, namespace = the first path part. A missing step is numbered on
  from the series' last one, as Neptune's server did; fractional steps are
  truncated (counted).
* Single-value fields and string sets -> one hparams event: `parameters/...`
  at the top level (rltrack's Neptune backend writes hyperparameters there),
  other namespaces under their own path. The single values of `sys/...`,
  `source_code/...` and `monitoring/...` (the client's hostname, pid and tid
  per process) go to meta.json `info["neptune"]`, not to the hyperparameters;
  `sys/name` names the run, `sys/failed` sets its status. Monitoring series
  (stdout, stderr, cpu, memory) are series like any other.
* Uploaded files (still on disk, or kept in the folder's `upload_path/`) ->
  `files/<path>.<ext>` and artifact events (`iteration` read from a name
  like `iteration_<N>`, `best` for a name `best`).
* `Clear*Log` and `DeleteAttribute`: the earlier values and files of that
  path are left out, as Neptune would have shown them, and counted per value
  (the client clears every monitoring series when a run starts: nothing is
  counted for that).
* Not imported, counted in report.json (section `neptune-import`): source
  file sets, series configuration, Neptune artifacts, copied attributes, and
  containers that are not runs (models, projects).

An async folder's operations are all imported, acknowledged or not: the
server that acknowledged them is gone. A container already imported into
`root` (meta.json `info.neptune.container_id`) is skipped.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rltrack.importers.imported import imported_runs
from rltrack.trackers.neptune.queue import operations
from rltrack.training.config import make_logger
from rltrack.core.events import Event
from rltrack.training.logger import Logger
from rltrack.sinks.rundir import safe_filename

SECTION = "neptune-import"
SOURCE = "neptune"
STEP_AXIS = "step"
CONTAINER_TYPES = ("run", "model", "model_version", "project")
MODE_DIRS = ("offline", "async", "sync")
#: Namespaces the client fills about the run itself; their single values go to
#: meta.json info (`monitoring/<process hash>/` holds each process's hostname, pid and tid).
RUN_LEVEL = ("sys", "source_code", "monitoring")
ASSIGNS = ("AssignFloat", "AssignInt", "AssignBool", "AssignString", "AssignDatetime")
STRING_SETS = ("AddStrings", "RemoveStrings", "ClearStringSet")
RESETS = ("ClearFloatLog", "ClearStringLog", "ClearImageLog", "DeleteAttribute")
SERIES = {"LogFloats": "scalars", "LogStrings": "text", "LogImages": "image"}
UPLOADS = ("UploadFile", "UploadFileContent")
#: The pipeline drains the logger's queue meanwhile; waiting now and then bounds its memory.
FLUSH_EVERY = 10_000
_ITERATION = re.compile(r"iteration_(\d+)")

FieldPath = tuple[str, ...]


@dataclass
class Container:
    """One Neptune run (or model, project): its id and the folders holding its operations."""

    type: str
    id: str
    mode: str
    folders: list[Path] = field(default_factory=list)


def import_folder(path: Path, root: Path) -> list[Path]:
    """Imports every Neptune run found under `path` (a project directory, its
    `.neptune`, or one run folder) as a run directory under `root`; returns
    the run directories created."""
    path, root = Path(path), Path(root)
    containers = find_containers(path)
    if not containers:
        raise ValueError(f"{path}: no Neptune operation files (data-*.log) found; point at a .neptune folder or one of its run folders")
    done = imported_runs(root, "neptune", "container_id")
    created = []
    for container in containers:
        if container.type != "run":
            print(f"rltrack: skipping Neptune {container.type} {container.id}: only runs are imported", file=sys.stderr)
        elif container.id in done:
            print(f"rltrack: Neptune run {container.id} was already imported as {done[container.id]}", file=sys.stderr)
        else:
            created.append(_import_run(container, root))
    return created


def find_containers(path: Path) -> list[Container]:
    """The containers whose operation files lie under `path`, each with its folders oldest first."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    containers: dict[tuple[str, str], Container] = {}
    for folder in sorted({p.parent for p in path.rglob("data-*.log")}):
        kind, uid, mode = _identify(folder)
        containers.setdefault((kind, uid), Container(kind, uid, mode)).folders.append(folder)
    for container in containers.values():
        container.folders.sort(key=_first_time)
    return list(containers.values())


# ---- one container --------------------------------------------------------


class _Fields:
    """First pass over a container: its single-value fields and string sets as
    they stand at the end, and where each path was last cleared or deleted."""

    def __init__(self, container: Container) -> None:
        self.values: dict[FieldPath, Any] = {}
        self.resets: dict[FieldPath, int] = {}
        self.first_time: float | None = None
        for seq, (_, op, at) in enumerate(_all_operations(container)):
            self.first_time = at if self.first_time is None else self.first_time
            self._apply(seq, op)

    def _apply(self, seq: int, op: dict[str, Any]) -> None:
        kind, path = op.get("type", ""), tuple(op.get("path", ()))
        if kind == "AssignDatetime":
            self.values[path] = datetime.datetime.fromtimestamp(op["value"] / 1000, datetime.timezone.utc).isoformat()
        elif kind in ASSIGNS:
            self.values[path] = op.get("value")
        elif kind == "AddStrings":
            self.values[path] = sorted(set(self._strings(path)) | set(op.get("values", [])))
        elif kind == "RemoveStrings":
            self.values[path] = sorted(set(self._strings(path)) - set(op.get("values", [])))
        elif kind == "ClearStringSet":
            self.values[path] = []
        elif kind in RESETS:
            self.resets[path] = seq
            if kind == "DeleteAttribute":
                self.values.pop(path, None)

    def _strings(self, path: FieldPath) -> list[str]:
        current = self.values.get(path)
        return current if isinstance(current, list) else []

    def hparams(self) -> dict[str, Any]:
        """User fields as a nested dict, `parameters/` unwrapped to the top level."""
        nested: dict[str, Any] = {}
        for path, value in self.values.items():
            if not path or path[0] in RUN_LEVEL:
                continue
            parts = path[1:] if path[0] == "parameters" and len(path) > 1 else path
            node = nested
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[parts[-1]] = value
        return nested

    def run_level(self) -> dict[str, Any]:
        return {"/".join(path): value for path, value in self.values.items() if path and path[0] in RUN_LEVEL}


def _import_run(container: Container, root: Path) -> Path:
    fields = _Fields(container)
    name = fields.values.get(("sys", "name"))
    if not isinstance(name, str) or not name or name == "Untitled":
        name = f"neptune_{container.id[:8]}"
    logger = make_logger({"run": {"root": str(root), "name": name}, "backends": {"use": ["local"]}})
    logger.set_run_info({"neptune": {
        "container_id": container.id,
        "container_type": container.type,
        "mode": container.mode,
        "imported_from": [str(f.resolve()) for f in container.folders],
        "created_at": _read_json(container.folders[0] / "metadata.json").get("createdAt"),
        "fields": fields.run_level(),
    }})
    hparams = fields.hparams()
    if hparams:
        logger.emit(Event(fields.first_time or 0.0, hparams, "hparams", source=SOURCE, steps={STEP_AXIS: 0}, run=logger.name))
    _Replay(logger, fields.resets).run(container)
    logger.close(status="failed" if fields.values.get(("sys", "failed")) is True else "finished")
    return logger.run_dir


class _Replay:
    """Second pass: series values, images and files, emitted as events in order."""

    def __init__(self, logger: Logger, resets: dict[FieldPath, int]) -> None:
        self.logger = logger
        self.report = logger.report
        self.resets = resets
        self.last_step: dict[FieldPath, int] = {}
        self.emitted = 0

    def run(self, container: Container) -> None:
        for seq, (folder, op, at) in enumerate(_all_operations(container, self.report)):
            kind, path = op.get("type", ""), tuple(op.get("path", ()))
            if not path:
                continue
            if kind in (*ASSIGNS, *STRING_SETS, *RESETS):
                continue  # done by _Fields
            if kind not in SERIES and kind not in UPLOADS:
                self.report.count("dropped", f"{kind} operations (not imported)", section=SECTION)
            elif seq < self.resets.get(path, -1):
                values = len(op.get("values", [])) if kind in SERIES else 1
                if values:
                    self.report.count("dropped", "values cleared or deleted later in Neptune", values, section=SECTION)
            elif kind in SERIES:
                for value in op.get("values", []):
                    self._value(kind, path, value)
            else:
                self._file(folder, kind, path, op, at)

    def _value(self, kind: str, path: FieldPath, point: dict[str, Any]) -> None:
        step = self._step(path, point.get("step"))
        namespace, key = _split(path)
        value = point.get("value")
        if kind == "LogImages":
            value = self._image(path, step, value)
            if value is None:
                return
        self._emit(Event(float(point.get("ts") or 0.0), {key: value}, SERIES[kind], namespace, {STEP_AXIS: step}, SOURCE, run=self.logger.name))

    def _step(self, path: FieldPath, raw: Any) -> int:
        if raw is None:
            step = self.last_step.get(path, -1) + 1
        else:
            step = int(raw)
            if step != raw:
                self.report.count("cut", "fractional Neptune step truncated to an integer", section=SECTION)
        self.last_step[path] = step
        return step

    def _image(self, path: FieldPath, step: int, value: Any) -> str | None:
        data = value.get("data") if isinstance(value, dict) else value
        try:
            content = base64.b64decode(data or "", validate=True)
        except (binascii.Error, TypeError, ValueError):
            content = b""
        if not content:
            self.report.count("dropped", "image without readable data", section=SECTION)
            return None
        target = _free(self.logger.run_dir / "media" / Path(*map(safe_filename, path)) / f"{step}.png")
        target.write_bytes(content)
        return str(target.relative_to(self.logger.run_dir))

    def _file(self, folder: Path, kind: str, path: FieldPath, op: dict[str, Any], at: float) -> None:
        ext = op.get("ext") or ""
        parts = [safe_filename(part) for part in path]
        parts[-1] = safe_filename(path[-1] + (f".{ext}" if ext else ""))
        target = _free(self.logger.run_dir / "files" / Path(*parts))
        if kind == "UploadFileContent":
            target.write_bytes(base64.b64decode(op.get("file_content") or ""))
        else:
            candidates = [Path(op["file_path"])] if op.get("file_path") else []
            candidates += [folder / "upload_path" / op["tmp_file_name"]] if op.get("tmp_file_name") else []
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                self.report.count("dropped", "uploaded file no longer on disk", section=SECTION)
                return
            shutil.copyfile(found, target)
        iteration = _ITERATION.fullmatch(path[-1])
        data = {"path": str(target.relative_to(self.logger.run_dir)), "iteration": int(iteration.group(1)) if iteration else None, "metric": None, "best": path[-1] == "best"}
        steps = {"iteration": data["iteration"]} if iteration else {}
        self._emit(Event(at, data, "artifact", path[0] if len(path) > 1 else "", steps, SOURCE, run=self.logger.name))

    def _emit(self, event: Event) -> None:
        self.logger.emit(event)
        self.emitted += 1
        if self.emitted % FLUSH_EVERY == 0:
            self.logger.flush()


# ---- helpers ----------------------------------------------------------------


def _all_operations(container: Container, report: Any = None) -> Iterator[tuple[Path, dict[str, Any], float]]:
    """Every operation of the container's folders; an unreadable line (a torn write) is counted when `report` is given."""

    def unreadable() -> None:
        report.count("dropped", "unreadable line in a Neptune data file", section=SECTION)

    for folder in container.folders:
        for op, at in operations(folder, unreadable if report is not None else None):
            yield folder, op, at


def _identify(folder: Path) -> tuple[str, str, str]:
    """(container type, id, mode) from metadata.json, else from the folder names
    the client uses: `<type>__<id>__<pid>__<key>`, `<type>__<id>/exec-...`, `<id>/exec-...`."""
    meta = _read_json(folder / "metadata.json")
    for name in (folder.name, folder.parent.name):
        parts = name.split("__")
        if len(parts) in (2, 4, 5) and parts[0] in CONTAINER_TYPES:
            kind, uid = parts[0], parts[1]
            break
    else:
        kind, uid = "run", folder.parent.name if folder.name.startswith("exec-") else folder.name
    mode = meta.get("mode") or next((p.name for p in folder.parents if p.name in MODE_DIRS), "unknown")
    return str(meta.get("containerType", kind)), str(meta.get("containerId", uid)), str(mode)


def _split(path: FieldPath) -> tuple[str, str]:
    """Neptune path -> (namespace, key): `["collector", "reward"]` -> ("collector", "reward")."""
    return (path[0], "/".join(path[1:])) if len(path) > 1 else ("", path[0])


def _first_time(folder: Path) -> float:
    return next((at for _, at in operations(folder)), 0.0)


def _free(target: Path) -> Path:
    """`target`, or `<stem>_2<suffix>`, ... if taken; its directory created."""
    target.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = target, 1
    while candidate.exists():
        n += 1
        candidate = target.with_name(f"{target.stem}_{n}{target.suffix}")
    return candidate


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
