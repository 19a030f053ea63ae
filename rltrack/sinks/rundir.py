"""The parts of a run directory every run has, whichever backends it uses.

    meta.json                   the run's index entry (start, host, ip, pid, tracked
                                hyperparameters, status, rltrack version)
    total_config.py             config + hyperparameters as one Python literal
    formatted_total_config.py   the same, pretty-printed
    git_log.txt, git_diff.txt   when started inside a git work tree
    code/                       copies of the files matched by config run.backup_code
    ckpt/iteration_<N>.pth.tar, ckpt/ckpt_best.pth.tar
    journal.jsonl, report.json

`create_run_dir` runs on the caller's thread (the directory must exist before
`make_logger` returns), and so does `save_checkpoint` (a checkpoint holds the
object as it was at the call); `RunFiles` does the rest from the pipeline thread.
"""

from __future__ import annotations

import ast
import json
import os
import pprint
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from rltrack.core.atomic_file import write_atomic
from rltrack.sinks.base import Backend, RunContext
from rltrack.core.events import Event
from rltrack.journal import ended_with, journal_path
from rltrack.core.redact import Redactor
from rltrack.core.values import flatten, literal
from rltrack.core.version import __version__

#: Seconds between saves of meta.json when only the run info changed (the
#: run's end and new hyperparameters are saved at once): a Tune driver
#: holds a run per trial, and rewriting each trial's meta.json at every flush
#: was most of its loggers' CPU (64 trials: ~128 files a second).
INFO_SAVE_EVERY = 5.0
_UNSAFE = re.compile(r"[^\w.\-]+")  # \w keeps letters of every script: "倒立摆_ppo" stays readable
#: Bytes of a run name, leaving room for the "_yymmdd_HHMMSS_N" suffix in the
#: 255 bytes most file systems allow per path component.
MAX_NAME_BYTES = 200


def safe_filename(name: str) -> str:
    """A single path component: no separators, no `..`, no control characters,
    short enough for the file system."""
    cleaned = _UNSAFE.sub("_", name).strip(".")
    cleaned = cleaned.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", "ignore").strip(".")
    return cleaned or "_"


def media_file(run_dir: Path, namespace: str, key: str, step: int, suffix: str = ".png") -> tuple[Path, str]:
    """A new file for one image or video of a run: `media/<namespace>/<key>_<step><suffix>`
    (`_1`, `_2`, ... when taken; namespace "" is `main`), its folder made;
    returns its path and its path relative to the run directory (what the
    event's data holds)."""
    folder = Path("media") / safe_filename(namespace or "main")
    stem = f"{safe_filename(key)}_{step}"
    (run_dir / folder).mkdir(parents=True, exist_ok=True)
    name, n = f"{stem}{suffix}", 1
    while (run_dir / folder / name).exists():
        name, n = f"{stem}_{n}{suffix}", n + 1
    return run_dir / folder / name, (folder / name).as_posix()


def create_run_dir(root: Path, name: str) -> Path:
    """`root/name`, or `root/name_yymmdd_HHMMSS` (then `..._2`, ...) if taken."""
    root.mkdir(parents=True, exist_ok=True)
    name = safe_filename(name)
    candidates = [name, f"{name}_{time.strftime('%y%m%d_%H%M%S')}"]
    candidates += [f"{candidates[1]}_{i}" for i in range(2, 1000)]
    for candidate in candidates:
        try:
            (root / candidate).mkdir()
        except FileExistsError:
            continue
        return root / candidate
    raise FileExistsError(f"could not find a free run directory name for {name!r} under {root}")


class RunFiles(Backend):
    """Keeps meta.json and the config files of the run up to date."""

    name = "run"

    def __init__(self, tracked: list[str], backends: list[str], redactor: Redactor, resumed: bool = False) -> None:
        self._tracked = tracked
        self._redactor = redactor
        self._resumed = resumed
        self._primary = True  # writes meta.json and the config files
        self._hparams: dict[str, Any] = {}
        self._meta: dict[str, Any] = {}
        self._info_changed = False
        self._saved_at = 0.0
        self._backends = backends

    def open(self, run: RunContext) -> None:
        super().open(run)
        (run.run_dir / "ckpt").mkdir(exist_ok=True)
        now = time.time()
        settings = run.config.get("run", {})
        self._meta = {
            "name": run.name,
            "task": run.task,
            "run_dir": str(run.run_dir.resolve()),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "start_unix": now,
            "host": socket.gethostname(),
            "ip": _ip_address(),
            "pid": os.getpid(),
            "argv": self._redactor.argv(sys.argv),
            "python": sys.version.split()[0],
            "rltrack_version": __version__,
            "backends": self._backends,
            "tracked": {},
            "info": {},
            "status": "running",
            "end_time": None,
        }
        if run.worker is not None:
            self._meta["worker"] = run.worker
            self._primary = _claim(run.run_dir / "meta.json")
        if self._resumed:
            self._continue(run.run_dir, now)
        self._save_meta()
        self._save_config()
        _save_git_info(run.run_dir)
        _backup_code(run.run_dir, settings.get("backup_code", []))

    def _continue(self, run_dir: Path, now: float) -> None:
        """A resumed run keeps its start, name, task, hyperparameters and info;
        each resumption is listed with its time and process."""
        earlier = json.loads((run_dir / "meta.json").read_text())
        for key in ("name", "task", "start_time", "start_unix", "tracked", "info"):
            if key in earlier:
                self._meta[key] = earlier[key]
        resumption = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "pid": os.getpid(),
            "previous_status": _previous_status(earlier, journal_path(run_dir, self.run.worker)),
        }
        self._meta["resumed"] = [*earlier.get("resumed", []), resumption]
        config_file = run_dir / "total_config.py"
        if config_file.is_file():
            self._hparams = ast.literal_eval(config_file.read_text(encoding="utf-8")).get("hparams", {})

    def write(self, events: list[Event]) -> None:
        changed = False
        for event in events:
            if event.kind == "hparams":
                _merge(self._hparams, event.data)
                changed = True
        if changed:
            flat = flatten(self._hparams)
            self._meta["tracked"] = {k: flat.get(k, self._hparams.get(k)) for k in self._tracked}
            self._save_meta()
            self._save_config()

    def set_run_info(self, info: dict[str, Any]) -> None:
        """Saved at a flush, at most every `INFO_SAVE_EVERY` seconds, rather
        than per call: Tune sends its bookkeeping with every result."""
        self._meta["info"].update(literal(info))
        self._info_changed = True

    def flush(self) -> None:
        if self._info_changed and time.monotonic() - self._saved_at >= INFO_SAVE_EVERY:
            self._save_meta()

    def close(self, status: str) -> None:
        """Saves the run info not saved yet. The run's end (`status`,
        `end_time`) is not this process's to write: the agent writes it once
        it has read the journal to its `end` line, or the logger when no agent
        serves the run (rltrack.delivery.run_end, `mark_ended`)."""
        if self._info_changed:
            self._save_meta()

    def _save_meta(self) -> None:
        """meta.json, written by the run's only writer or, when several write it,
        by the one that created it; each of several writers also keeps
        `workers/<worker>.json`."""
        self._info_changed = False
        self._saved_at = time.monotonic()
        text = json.dumps(self._meta, indent=2) + "\n"
        if self.run.worker is not None:
            (self.run.run_dir / "workers").mkdir(exist_ok=True)
            write_atomic(self.run.run_dir / "workers" / f"{self.run.worker}.json", text)
        if self._primary:
            write_atomic(self.run.run_dir / "meta.json", text)

    def _save_config(self) -> None:
        if not self._primary:
            return
        total = literal({"config": self.run.config, "hparams": self._hparams})
        write_atomic(self.run.run_dir / "total_config.py", repr(total) + "\n")
        write_atomic(self.run.run_dir / "formatted_total_config.py", pprint.pformat(total, width=100, sort_dicts=False) + "\n")


def mark_ended(run_dir: Path, writer: str | None, pid: int, status: str) -> None:
    """The end of one writer's session (see rltrack.delivery.run_end): its meta.json
    (and `workers/<writer>.json`) says `status` and the end time, if the
    writer's process (`pid`) wrote it and it still says running."""
    paths = [run_dir / "meta.json"] + ([run_dir / "workers" / f"{writer}.json"] if writer is not None else [])
    for path in paths:
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("pid") == pid and meta.get("status") == "running":
            meta["status"] = status
            meta["end_time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            write_atomic(path, json.dumps(meta, indent=2) + "\n")


def _previous_status(meta: dict[str, Any], journal: Path) -> Any:
    """How the previous session ended: meta.json's status, or the journal's
    `end` line while the agent has not yet written it into meta.json."""
    status = meta.get("status")
    return (ended_with(journal) or status) if status == "running" else status


def save_checkpoint(run_dir: Path, obj_or_path: Any, iteration: int, best: bool) -> Path:
    """Writes `ckpt/iteration_<N>.pth.tar` (and `ckpt_best.pth.tar` when best) now,
    on the caller's thread: a checkpoint must hold the object, or the file, as it
    is at this call, not as training changes it (or overwrites the file) later.
    A path (str or os.PathLike) is copied byte for byte; any other object is
    saved with `torch.save` when torch is installed, else pickled."""
    folder = run_dir / "ckpt"
    target = folder / f"iteration_{iteration}.pth.tar"
    tmp = folder / f".{target.name}.tmp"
    try:
        if isinstance(obj_or_path, (str, os.PathLike)):
            shutil.copyfile(obj_or_path, tmp)
        else:
            with tmp.open("wb") as f:
                _serialise(obj_or_path, f)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)  # readers never see a half-written checkpoint
    if best:
        shutil.copyfile(target, tmp)
        os.replace(tmp, folder / "ckpt_best.pth.tar")
    return target


def _serialise(obj: Any, f: IO[bytes]) -> None:
    try:
        import torch
    except ImportError:
        import pickle

        pickle.dump(obj, f)
    else:
        torch.save(obj, f)


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    """Nested update: `log_hparams({"opt": {"eps": 1e-8}})` after
    `log_hparams({"opt": {"lr": 0.1}})` keeps `opt.lr`. Builds its own dicts,
    never changing the events' data (which other backends keep)."""
    for key, value in new.items():
        if isinstance(value, dict):
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = value


def _claim(path: Path) -> bool:
    """Creates `path` empty if nobody has; True for the one process that did."""
    try:
        with path.open("x"):
            return True
    except FileExistsError:
        return False


def _ip_address() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _backup_code(run_dir: Path, patterns: list[str]) -> None:
    """Copies the files matched by `patterns` (globs relative to the working
    directory, `**` recursing) into `code/`, keeping their relative paths, so
    the run can be re-run as it was. Files outside the working directory are
    skipped: their relative path would leave `code/`."""
    cwd = Path.cwd().resolve()
    for pattern in patterns:
        for source in sorted(cwd.glob(pattern)):
            if not source.is_file():
                continue
            try:
                relative = source.resolve().relative_to(cwd)
            except ValueError:
                continue
            target = run_dir / "code" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


#: Seconds a process reuses the git information it took for an earlier run
#: started in the same directory: a Tune driver starts a run per trial, and
#: three `git` processes per trial held its loop ~1 s each on a busy machine
#: (64 trials: a minute of a sweep). A run started later takes it anew.
GIT_INFO_REUSE = 60.0
_git_info_taken: dict[tuple[str, ...], tuple[float, str | None, str | None]] = {}


def _save_git_info(run_dir: Path) -> None:
    log, diff = _git_info()
    if log is not None:
        (run_dir / "git_log.txt").write_text(log)
    if diff is not None:
        (run_dir / "git_diff.txt").write_text(diff)


def _git_info() -> tuple[str | None, str | None]:
    """`git log` and `git diff HEAD` of the working directory's work tree
    (None outside one), taken at most once every `GIT_INFO_REUSE` seconds per directory."""
    key = (os.getcwd(), *(os.environ.get(name, "") for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES")))
    taken = _git_info_taken.get(key)
    if taken is not None and time.monotonic() - taken[0] < GIT_INFO_REUSE:
        return taken[1], taken[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    log = diff = None
    if git("rev-parse", "--is-inside-work-tree") is not None:
        log, diff = git("log", "-n", "20", "--stat"), git("diff", "HEAD")
    _git_info_taken[key] = (time.monotonic(), log, diff)
    return log, diff
