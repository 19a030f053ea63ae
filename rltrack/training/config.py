"""Config file, dict or environment -> a validated config -> a running `Logger`.

A config has three sections (TOML shown; YAML and dicts nest the same way):

    [run]        the keys of `RUN_OPTIONS` (each with its default and what it means)
    [[filters]]  type = "none" | "smoothing" | "aggregate" | "time" | "keys", plus its parameters
    [backends]   use = ["local", ...], and a [backends.<name>] table of settings per backend

Every mistake is a `ConfigError` naming where it is (file and key), the value
found, what is allowed, and how to fix it. Environment: `RLTRACK_CONFIG` names
the config file used when none is given; `RLTRACK_BACKENDS=local,console`
overrides `backends.use`. The documentation's configuration page is generated
from this module (`RUN_OPTIONS`, the filters' and backends' signatures), so it
cannot drift from what `make_logger` accepts.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping

from rltrack.agent.files import agent_dir
from rltrack.delivery.registry import Backend, RemoteBackend, backend_class, backend_types, is_backend_name
from rltrack.frameworks.canonical import NAME_MODES
from rltrack.delivery.construct import ConfigError, backend_type, build_backend, build_filter, check_keys, choices
from rltrack.filters import Filter, FilterChain
from rltrack.journal import WRITER_NAME
from rltrack.training.logger import DEFAULT_CLOSE_TIMEOUT, Logger
from rltrack.core.redact import Redactor
from rltrack.core.report import Report
from rltrack.core.storage import is_uri, refuse_uri_as_path
from rltrack.training.resume import resolve_run_dir
from rltrack.sinks.rundir import create_run_dir, safe_filename

#: The `[run]` section: key -> (default, what it means). The defaults below and
#: the documentation's configuration page both come from this table.
RUN_OPTIONS: dict[str, tuple[Any, str]] = {
    "root": ("runs", "where run directories go"),
    "stores": (None, "where the trackers' default stores go (MLflow's `mlflow.db`, trackio's directory, TensorBoard's logdir); None: `root`"),
    "name": (None, 'the run directory\'s name; if it exists, "_yymmdd_HHMMSS" is appended; None: the script\'s name'),
    "task": (None, "the experiment the run belongs to (MLflow experiment, W&B project and group, trackio project); None: Tune's experiment, SpinningUp's `exp_name`, else the script's name"),
    "tracked": ([], "hyperparameters recorded in the run's index entry (meta.json) and its run id"),
    "names": ("both", 'canonical (DI-engine) names beside native keys: "both" | "canonical" | "native"'),
    "backup_code": ([], 'globs of source files copied into the run\'s `code/` folder, e.g. ["src/**/*.py"]'),
    "redact": ([], "more regexes of key words marking credentials (api_key, token, password, secret, auth, ... always)"),
    "worker": (None, "this process's name when several processes write one run (needs `name`)"),
    "close_timeout": (DEFAULT_CLOSE_TIMEOUT, "seconds `close()` waits for the agent (0 allowed; in a dict, None waits for every tracker)"),
    "storage": (None, "a URI every node reaches (s3://bucket/prefix, file:///shared/runs) where the agent mirrors the run (docs/storage.md); None: Tune's storage_path under Tune; false: not even that"),
    "launch_runs": ("per-process", '`rltrack run`: "per-process" (each Python process that writes TensorBoard has a run of its own) | "one" (every process of the launch writes one run, each as a writer of it; children\'s values in namespaces named after their log directories)'),
    "delivery": ("agent", '"agent": this machine\'s agent delivers to the trackers; "from-storage": it only mirrors to `storage`, and `rltrack deliver <storage>` delivers from there'),
}
DEFAULTS: dict[str, Any] = {
    "run": {key: default for key, (default, _) in RUN_OPTIONS.items()},
    "filters": [],
    "backends": {"use": ["local"]},
}
SECTIONS = tuple(DEFAULTS)
RUN_KEYS = tuple(DEFAULTS["run"])
#: run.delivery: who delivers a run to its trackers (see `make_logger` and rltrack.cli.deliver_command).
DELIVERY_MODES = ("agent", "from-storage")
#: run.launch_runs: how many runs the Python processes of one `rltrack run` write (rltrack.cli.run_child).
LAUNCH_RUNS = ("per-process", "one")


def load_config(config: str | Path | Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """Reads, merges (defaults < file or dict < overrides < environment) and validates."""
    return _load(config, overrides)[0]


def _load(config: str | Path | Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> tuple[dict[str, Any], list[Filter]]:
    """`load_config`, and the filters its validation built (a logger uses them)."""
    source = _describe(config)
    if config is None and os.environ.get("RLTRACK_CONFIG"):
        config = os.environ["RLTRACK_CONFIG"]
        if not Path(config).is_file():
            raise ConfigError(
                f"RLTRACK_CONFIG={config!r} names no file; point it at an existing .toml/.yaml file or unset it"
            )
    if isinstance(config, (str, Path)):
        config = read_config_file(Path(config))
    elif config is not None and not isinstance(config, Mapping):
        raise ConfigError(f"config must be a file path, a dict or None, got {type(config).__name__}")
    merged = copy.deepcopy(DEFAULTS)
    for layer, where in ((config or {}, source), (overrides, "make_logger() keyword arguments")):
        check_keys(layer, SECTIONS, where, "")
        for section, value in layer.items():
            if isinstance(value, Mapping) and isinstance(merged[section], dict):
                merged[section].update(copy.deepcopy(dict(value)))
            else:
                merged[section] = copy.deepcopy(value)
    env = os.environ.get("RLTRACK_BACKENDS")
    if env:
        use = [b.strip() for b in env.split(",") if b.strip()]
        for name in use:  # named here: the file would be blamed for the environment's mistake
            if not is_backend_name(name):
                raise ConfigError(
                    f"RLTRACK_BACKENDS={env!r}: {name!r} is not a backend;{choices(name, backend_types())}"
                    " Fix the comma-separated list or unset the variable."
                )
        if isinstance(merged["backends"], dict):  # else _validate reports the bad section
            merged["backends"]["use"] = use
    return merged, _validate(merged, source)


def _describe(config: Any) -> str:
    """Where a config comes from, as error messages name it."""
    if config is None and os.environ.get("RLTRACK_CONFIG"):
        return f"{os.environ['RLTRACK_CONFIG']} (from RLTRACK_CONFIG)"
    return str(config) if isinstance(config, (str, Path)) else "config"


def read_config_file(path: Path) -> dict[str, Any]:
    """TOML or YAML by extension; neither format can execute code."""
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing .toml/.yaml path, a dict, or None")
    text = path.read_text(encoding="utf-8")
    try:
        suffix = path.suffix.lower()
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"config file {path}: unknown extension {path.suffix!r}; use .toml, .yaml or .yml")
    except ConfigError:
        raise
    except Exception as exc:  # the parsers' own syntax errors, with line numbers
        raise ConfigError(f"config file {path} could not be parsed: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a table/mapping, got {type(data).__name__}")
    return data


def _validate(cfg: dict[str, Any], where: str) -> list[Filter]:
    """Raises `ConfigError` at the first mistake; returns the filters, built to check them."""
    run = cfg["run"]
    if not isinstance(run, dict):
        raise ConfigError(f"{where}: run must be a table with keys {', '.join(RUN_KEYS)}, got {run!r}")
    check_keys(run, RUN_KEYS, where, "run.")
    if not isinstance(run["root"], (str, Path)) or not str(run["root"]):
        raise ConfigError(f'{where}: run.root = {run["root"]!r} must be a directory path, e.g. root = "runs"')
    if run["stores"] is not None and (not isinstance(run["stores"], (str, Path)) or not str(run["stores"])):
        raise ConfigError(f'{where}: run.stores = {run["stores"]!r} must be a directory path, e.g. stores = "runs"')
    for key in ("root", "stores"):
        try:
            refuse_uri_as_path(run[key], f"{where}: run.{key}", f'runs are written to a local directory and mirrored to storage: set storage = {run[key]!r} and keep {key} local (e.g. "runs")')
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    storage = run["storage"]
    if storage not in (None, False) and (not isinstance(storage, (str, Path)) or not (is_uri(storage) or Path(storage).is_absolute())):
        raise ConfigError(
            f'{where}: run.storage = {storage!r} must be a storage URI or an absolute path every node reaches, '
            'e.g. storage = "s3://bucket/runs" or "file:///shared/runs" (false: none)'
        )
    if run["launch_runs"] not in LAUNCH_RUNS:
        raise ConfigError(f'{where}: run.launch_runs = {run["launch_runs"]!r} is not allowed; use one of {", ".join(map(repr, LAUNCH_RUNS))}, e.g. launch_runs = "one"')
    if run["delivery"] not in DELIVERY_MODES:
        raise ConfigError(f'{where}: run.delivery = {run["delivery"]!r} is not allowed; use one of {", ".join(map(repr, DELIVERY_MODES))}, e.g. delivery = "from-storage"')
    if run["name"] is not None and (not isinstance(run["name"], str) or not run["name"]):
        raise ConfigError(f'{where}: run.name = {run["name"]!r} must be a non-empty string, e.g. name = "cartpole_ppo"')
    if run["task"] is not None and (not isinstance(run["task"], str) or not run["task"].strip("/")):
        raise ConfigError(f'{where}: run.task = {run["task"]!r} must be a non-empty string, e.g. task = "cartpole_sweep"')
    globs = run["backup_code"]
    if not isinstance(globs, list) or not all(isinstance(g, str) and g for g in globs):
        raise ConfigError(f'{where}: run.backup_code = {globs!r} must be a list of glob patterns, e.g. backup_code = ["src/**/*.py"]')
    if not isinstance(run["redact"], list):
        raise ConfigError(f'{where}: run.redact = {run["redact"]!r} must be a list of regexes, e.g. redact = ["session[_-]?id"]')
    for index, pattern in enumerate(run["redact"]):
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(
                f'{where}: run.redact[{index}] = {pattern!r} is not a regular expression ({exc}); '
                'give key words to redact as a list of regexes, e.g. redact = ["session[_-]?id"]'
            ) from None
    worker = run["worker"]
    if worker is not None and (not isinstance(worker, str) or not WRITER_NAME.fullmatch(worker)):
        raise ConfigError(
            f'{where}: run.worker = {worker!r} must be a name of letters, digits, "_", "-" or "." '
            '(it becomes part of file names), e.g. worker = "actor_3"'
        )
    if worker is not None and not run["name"]:
        raise ConfigError(f'{where}: run.worker = {worker!r} needs run.name, the directory every writer of the run shares; add e.g. name = "impala_pong"')
    close_timeout = run["close_timeout"]
    if close_timeout is not None and (isinstance(close_timeout, bool) or not isinstance(close_timeout, (int, float)) or not close_timeout >= 0):
        raise ConfigError(
            f"{where}: run.close_timeout = {close_timeout!r} must be a number of seconds >= 0 (how long close() waits for the "
            "trackers; what is left is delivered afterwards), e.g. close_timeout = 5; in a dict, None waits for every tracker"
        )
    tracked = run["tracked"]
    if not isinstance(tracked, list) or not all(isinstance(t, str) for t in tracked):
        raise ConfigError(f'{where}: run.tracked = {tracked!r} must be a list of hyperparameter names, e.g. tracked = ["env_id", "lr"]')
    if run["names"] not in NAME_MODES:
        raise ConfigError(f'{where}: run.names = {run["names"]!r} is not allowed; use one of {", ".join(NAME_MODES)} (e.g. names = "both")')
    filters = cfg["filters"]
    if not isinstance(filters, list):
        raise ConfigError(f"{where}: filters = {filters!r} must be a list of tables ([[filters]] in TOML, a list in YAML)")
    built = [build_filter(spec, f"{where}: filters[{index}]") for index, spec in enumerate(filters)]
    backends = cfg["backends"]
    if not isinstance(backends, dict):
        raise ConfigError(f"{where}: backends must be a table with a 'use' list, got {backends!r}")
    use = backends["use"]
    if not isinstance(use, list) or not all(isinstance(b, str) for b in use):
        raise ConfigError(f'{where}: backends.use = {use!r} must be a list of backend names, e.g. use = ["local"]')
    check_keys(backends, ("use", *backend_types(), *(name for name in use if name not in backend_types())), where, "backends.")
    for index, name in enumerate(use):
        if name == "storage":
            raise ConfigError(f'{where}: backends.use[{index}] = "storage": set run.storage = "s3://bucket/prefix" (or another URI) instead; [backends.storage] may hold its every and segment_bytes')
        if not is_backend_name(name):
            raise ConfigError(
                f"{where}: backends.use[{index}] = {name!r} is not a backend;{choices(name, backend_types())}"
                ' A backend of your own is named by its import path, e.g. "mypackage.trackers:MyTracker".'
            )
    for name, settings in backends.items():  # every table, in use or not: a typo shows now, not the day it is switched on
        if name == "use":
            continue
        if not isinstance(settings, dict):
            raise ConfigError(f"{where}: backends.{name} must be a table of settings, got {settings!r}")
        if name == "storage":  # its uri and run come from run.storage (checked by make_logger when set)
            check_keys(settings, tuple(p for p in inspect.signature(backend_class(name)).parameters if p not in ("uri", "run")), f"{where}: backends.storage", "")
        else:
            backend_type(name, settings, where, in_use=name in use)
    return built


def make_logger(
    config: str | Path | Mapping[str, Any] | None = None, *, resume: str | Path | None = None, **overrides: Any
) -> Logger:
    """Builds a `Logger` from a config file path, a dict, or (None) `RLTRACK_CONFIG`
    else the defaults (the local backend under ./runs). Keyword arguments
    override whole config sections: `make_logger(run={"name": "demo"})`.
    `resume` (a run directory, or a run id from the index under `run.root`)
    continues that run instead of starting a new one (see rltrack.training.resume)."""
    cfg, filters = _load(config, overrides)
    where = _describe(config)
    report = Report()
    chain = FilterChain(filters, report)
    run = cfg["run"]
    redactor = Redactor(run["redact"])
    in_process: list[Backend] = []
    files: dict[str, dict[str, Any]] = {}
    trackers: dict[str, dict[str, Any]] = {}
    for name in cfg["backends"]["use"]:
        settings = _tags_redacted(cfg["backends"].get(name, {}), redactor)
        cls = backend_type(name, settings, where)  # every mistake shows here, not in the agent later
        if issubclass(cls, RemoteBackend):
            trackers[name] = _paths_resolved(settings)
        elif cls.in_training_process:
            in_process.append(build_backend(name, settings, where))
        else:
            files[name] = _paths_resolved(settings)
    storage = {**cfg["backends"].get("storage", {}), "uri": str(run["storage"]), "run": "."} if run["storage"] else {}
    if run["delivery"] == "from-storage" and not storage:
        raise ConfigError(f'{where}: run.delivery = "from-storage" needs run.storage, where the trackers\' deliverer reads the run; set e.g. storage = "s3://bucket/runs"')
    if storage:
        backend_type("storage", storage, where)  # before a run directory is made
    if files or trackers or storage:
        agent_dir()  # an agent directory another user owns is refused before a run directory is made
    root = Path(run["root"]).expanduser()
    run["stores"] = str(Path(run["stores"] or root).expanduser().resolve())  # the agent runs in another directory
    if run["delivery"] == "agent":
        make_stores(trackers, Path(run["stores"]))
    if resume is None:
        run["task"] = run["task"] or default_task(run["name"])
    if run["worker"] is not None:
        run_dir = root / safe_filename(run["name"])
        run_dir.mkdir(parents=True, exist_ok=True)
    elif resume is None:
        run_dir = create_run_dir(root, run["name"] or _default_run_name())
    else:
        try:
            run_dir = resolve_run_dir(resume, root)
        except ValueError as exc:
            raise ConfigError(f"{exc}; pass the run's directory or its id as shown by `rltrack runs ls`") from None
        run["task"] = _task_of(run_dir) or run["task"] or default_task(run["name"])  # a resumed run stays in its experiment
    if run["storage"]:
        storage["run"] = _under(run_dir, root)
        if run["delivery"] == "from-storage":  # `rltrack deliver` delivers them, from storage, on another machine
            trackers.clear()
        trackers["storage"] = cfg["backends"]["storage"] = storage  # `rltrack sync` finds them there
    # the trackers get the real settings (a tracking URI may hold a password
    # the client needs); everything that writes the config gets it redacted
    return Logger(
        run_dir, redactor.mapping(cfg), chain, in_process, report, run["tracked"], redactor, resumed=resume is not None,
        files=files, trackers=trackers,
    )  # fmt: skip


def make_stores(trackers: Mapping[str, dict[str, Any]], stores: Path) -> None:
    """Makes every tracker's store whole before the run's first value (see
    `RemoteBackend.make_store`); raises what the tracker raises when it cannot."""
    for name, settings in trackers.items():
        backend_class(name).make_store(settings, stores)


def launch_stores(cfg: Mapping[str, Any]) -> None:
    """`make_stores` for the runs a launch (`rltrack run`) will start with the loaded `cfg`."""
    run = cfg["run"]
    if run["delivery"] != "agent":
        return
    use = [name for name in cfg["backends"]["use"] if issubclass(backend_class(name), RemoteBackend)]
    trackers = {name: _paths_resolved(cfg["backends"].get(name, {})) for name in use}
    make_stores(trackers, Path(run["stores"] or run["root"]).expanduser().resolve())


def _under(run_dir: Path, root: Path) -> str:
    """The run's path under its root (`/`-separated): its path under run.storage too."""
    try:
        return run_dir.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # resumed from a directory outside the root
        return run_dir.name


def _paths_resolved(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with relative paths made absolute: the agent that uses them
    runs in another directory (`logdir`, `dir`, a `sqlite:///` tracking URI)."""
    settings = dict(settings)
    for key in ("logdir", "dir", "data_directory"):
        if isinstance(settings.get(key), str):
            settings[key] = str(Path(settings[key]).expanduser().resolve())
    uri = settings.get("tracking_uri")
    if isinstance(uri, str) and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        settings["tracking_uri"] = "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return settings


def _tags_redacted(settings: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A backend's settings with its `tags` redacted: trackers store tags verbatim."""
    settings = dict(settings)
    if "tags" in settings:
        settings["tags"] = redactor.value("tags", settings["tags"])
    return settings


#: Programs that start Python code without being the experiment: runs they start are grouped by their own name.
LAUNCHERS = frozenset({"ipykernel_launcher", "pytest", "py.test", "ipython", "jupyter"})


def _script() -> str:
    """The name of the script this process runs (`python train.py`, `python -m
    pkg.train`: "train"; `python -m pkg`: "pkg"), "" for `python -c`, an
    interactive session, a notebook kernel or a test runner."""
    if not sys.argv or sys.argv[0] in ("", "-c", "-m"):
        return ""
    path = Path(sys.argv[0])
    name = path.parent.name if path.stem == "__main__" else path.stem
    return "" if name in LAUNCHERS else name


def default_task(name: str | None) -> str:
    """The experiment a run belongs to when `run.task` does not say: the script
    that started it, so that runs of one script (seeds, settings) land in one
    experiment in the run index and in every tracker; in an interactive
    session, a notebook or a test, the run's name."""
    return _script() or name or _default_run_name()


def _task_of(run_dir: Path) -> str | None:
    try:
        task = json.loads((run_dir / "meta.json").read_text(encoding="utf-8")).get("task")
    except (OSError, ValueError):
        return None
    return task if isinstance(task, str) and task else None


def _default_run_name() -> str:
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else ""
    return script or "run"
