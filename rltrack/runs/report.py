"""A run as one self-contained HTML page (what `rltrack report RUN -o report.html` writes for one run).

The page holds the run's identity, its hyperparameters and config, a summary
table (final, best and mean of every metric), one figure per metric group
(namespace), the stage timings and the checkpoint list. It is a single file
that can be mailed or attached to a ticket: CSS inline, figures inlined as
base64 PNG, no scripts and no external URL. Everything that came from the run
(keys, values, names, paths) goes through `html.escape`, so a key like
`<script>` is shown, never run.
"""

from __future__ import annotations

import base64
import html
import io
import math
import pprint
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrack.sinks.tables import format_value
from rltrack.runs.grouping import AXIS_UNITS, primary_axis
from rltrack.runs.plot import DPI, plot_metrics, plot_timelog, stage_times
from rltrack.frameworks.canonical import stored_names
from rltrack.runs.run import MAIN_METRICS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from rltrack.runs.run import Run

#: Most subplots in one metric group's figure (the summary table still lists every metric).
MAX_PLOTS_PER_GROUP = 24

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; word-break: break-all; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: .85em; }
img { max-width: 100%; height: auto; display: block; margin: .5em 0; }
.note { color: #666; font-size: .9em; }
"""


def value_panels(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """(metric, the other names of the same value) per panel: a native key shares
    its canonical name's panel when, in every run that has it, it holds the same
    series (`collector/ep_rew_mean` and `collector/reward_mean`); keys that are
    equal by chance (CartPole's return and episode length) keep a panel each.
    Main metrics first, then by how many runs have the metric, then by name."""
    names = stored_names()
    keys = sorted({key for run in runs for key in run.metrics})
    aliases: dict[str, list[str]] = {key: [] for key in keys}
    for key in keys:
        canonical = names.get(key, key)
        same = all(run.metrics[key] == run.metrics.get(canonical) for run in runs if key in run.metrics)
        if canonical != key and canonical in aliases and same:
            aliases[canonical] += [key, *aliases.pop(key)]
    having = {key: sum(key in run.metrics for run in runs) for key in aliases}
    main = list(MAIN_METRICS)
    return sorted(aliases.items(), key=lambda c: (main.index(c[0]) if c[0] in main else len(main), -having[c[0]], c[0]))


#: Leaf name endings of counters -> what they count (the y axis's unit).
COUNT_UNITS = {
    "envstep_count": "environment steps",
    "total_timesteps": "environment steps",
    "avg_envstep_per_episode": "environment steps",
    "episode_count": "episodes",
    "sample_count": "samples",
}


def value_unit(metric: str) -> str:
    """The y axis's label: the metric, with seconds for durations, per second for
    rates and what a counter counts."""
    leaf = metric.rsplit("/", 1)[-1]
    if leaf == "fps" or "_per_s" in leaf:
        return f"{metric} (1/s)"
    counted = next((unit for ending, unit in COUNT_UNITS.items() if leaf.endswith(ending)), None)
    if counted is not None:
        return f"{metric} ({counted})"
    seconds = leaf.endswith(("_time", "_s", "_sec", "_seconds", "duration")) or "time_" in leaf
    return f"{metric} (s)" if seconds else metric


def metric_summary(run: Run) -> list[tuple[str, int, float, float, float]]:
    """(key, points, final, best, mean) per metric, sorted by key: final, best and the
    count from `Run.summary` (best: the minimum for losses, else the maximum), the mean
    over the same values (NaN is not a result)."""
    rows = []
    for key in sorted(run.summary):
        summary = run.summary[key]
        values = [value for _, value in run.metrics[key] if not math.isnan(value)]
        rows.append((key, int(summary["count"]), summary["final"], summary["best"], math.fsum(values) / len(values)))
    return rows


def metric_groups(keys: Iterable[str]) -> dict[str, list[str]]:
    """Metric keys by namespace (the part before the first `/`; `""` for none), sorted."""
    groups: dict[str, list[str]] = {}
    for key in sorted(keys):
        groups.setdefault(key.split("/", 1)[0] if "/" in key else "", []).append(key)
    return groups


def png_data_uri(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def escape(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else format_value(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric_from: int | None = None) -> str:
    """An HTML table; cells from column `numeric_from` on are right-aligned numbers."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for column, cell in enumerate(row):
            numeric = numeric_from is not None and column >= numeric_from
            cells.append(f'<td class="number">{escape(cell)}</td>' if numeric else f"<td>{escape(cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def section(section_id: str, title: str, content: str) -> str:
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{content}</section>'


def overview(run: Run) -> str:
    fields = [
        ("id", run.id),
        ("path", str(run.path)),
        ("task", run.task),
        ("status", run.status),
        ("framework", run.source),
        ("host", run.host),
        ("start time", run.start_time),
    ]
    return table(["field", "value"], [(name, "" if value is None else value) for name, value in fields])


def metric_figures(run: Run) -> str:
    """A figure per namespace, a subplot per value (`value_panels`: a native key and
    its canonical twin holding the same numbers are drawn once, the twin named below)."""
    parts = []
    chosen = dict(value_panels([run]))
    axis = {key: primary_axis([run], key) for key in chosen}
    for namespace, keys in metric_groups(chosen).items():
        shown = keys[:MAX_PLOTS_PER_GROUP]
        title = namespace or "(no namespace)"
        labels = [(f"{axis[key]} ({AXIS_UNITS.get(axis[key], 'steps')})", value_unit(key)) for key in shown]
        parts.append(f'<h3 class="metric-group">{html.escape(title)}</h3>')
        parts.append(f'<img alt="{html.escape(title)} metrics" src="{png_data_uri(plot_metrics(run, shown, labels))}">')
        twins = [f"{key} = {', '.join(chosen[key])}" for key in shown if chosen[key]]
        if twins:
            parts.append(f'<p class="note">Same values under another name: {html.escape("; ".join(twins))}.</p>')
        if len(keys) > len(shown):
            parts.append(f'<p class="note">{len(keys) - len(shown)} more metrics of this group are in the summary table.</p>')
    return "".join(parts) or '<p class="note">no metrics</p>'


def timings(run: Run) -> str:
    summaries = stage_times(run.timelog)
    if not summaries:
        return '<p class="note">no stage timings (use <code>with logger.timer("stage"):</code>)</p>'
    rows = [(s.stage, s.count, s.total, s.mean, s.std, s.minimum, s.maximum) for s in summaries]
    figure = f'<img alt="stage timings" src="{png_data_uri(plot_timelog(run))}">'
    return table(["stage", "calls", "total s", "mean s", "std s", "min s", "max s"], rows, numeric_from=1) + figure


def checkpoints(run: Run) -> str:
    rows = []
    for path in run.checkpoints:
        path = Path(path)
        try:
            stat = path.stat()
        except OSError:
            rows.append((_relative(path, run.path), "missing", ""))
            continue
        modified = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stat.st_mtime))
        rows.append((_relative(path, run.path), stat.st_size, modified))
    if not rows:
        return '<p class="note">no checkpoints</p>'
    return table(["file", "bytes", "modified"], rows)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def render_report(run: Run) -> str:
    """The whole page as a string."""
    summary = metric_summary(run)
    sections = [
        section("overview", "Run", overview(run)),
        section(
            "hyperparameters",
            "Hyperparameters",
            table(["name", "value"], sorted(run.hparams.items())) if run.hparams else '<p class="note">none recorded</p>',
        ),
        section("config", "Config", f"<pre>{html.escape(pprint.pformat(run.config, width=100, sort_dicts=True))}</pre>"),
        section(
            "summary",
            "Summary",
            table(["metric", "points", "final", "best", "mean"], summary, numeric_from=1)
            + '<p class="note">best: the minimum for losses, else the maximum.</p>'
            if summary
            else '<p class="note">no metrics</p>',
        ),
        section("metrics", "Metrics by group", metric_figures(run)),
        section("timings", "Stage timings", timings(run)),
        section("checkpoints", "Checkpoints", checkpoints(run)),
    ]
    return page(f"rltrack run {run.id}", sections)


def page(title: str, sections: Sequence[str], style: str = "", script: str = "") -> str:
    """A whole page: `title` (escaped here) as its title and heading, then the sections;
    `style` is added to the page's CSS, `script` (trusted: rltrack's own) ends its body."""
    heading = html.escape(title)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{heading}</title>'
        f'<link rel="icon" href="data:,"><style>{STYLE}{style}</style></head>'
        f"<body><h1>{heading}</h1>{''.join(sections)}{script}</body></html>\n"
    )


def write_report(run: Run, path: Path) -> Path:
    """Write `render_report(run)` to `path` (parent folders created); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(run), encoding="utf-8")
    return path
