"""MkDocs hook of the rltrack site (mkdocs.yml `hooks:`).

Why this exists: two things on the pages must come from the code, not from
hand-kept text. The configuration reference is generated from the config's
own definition (`RUN_OPTIONS` in rltrack/training/config.py, each filter's
and backend's constructor signature), so it cannot drift from what
`make_logger` accepts. And a code block that the docs tests only check for
syntax (the line `<!-- not run: <reason> -->` before its fence, see
tests/helpers/markdown_blocks.py) says so on the page, as a note with the reason.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

NOT_RUN = re.compile(r"^(?P<indent>[ \t]*)<!--\s*not run:\s*(?P<reason>.+?)\s*-->[ \t]*$", re.MULTILINE)
CONFIG_REFERENCE = "<!-- config reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if CONFIG_REFERENCE in markdown:
        markdown = markdown.replace(CONFIG_REFERENCE, config_reference())
    return NOT_RUN.sub(_note, markdown)


def _note(match: re.Match[str]) -> str:
    indent = match["indent"]
    return f'{indent}!!! note "Not run by the docs tests"\n{indent}    {match["reason"]}\n'


def config_reference() -> str:
    """The `[run]` keys, the filters and the backends with their keys and defaults, as Markdown tables."""
    from rltrack.delivery.registry import backend_class, backend_types
    from rltrack.filters import FILTER_TYPES
    from rltrack.training.config import RUN_OPTIONS

    out = ["### `[run]`", "", "| key | default | meaning |", "|---|---|---|"]
    out += [f"| `{key}` | {_value(default)} | {_cell(meaning)} |" for key, (default, meaning) in RUN_OPTIONS.items()]
    out += ["", "### `[[filters]]`", "", "Each table has `type` and that filter's keys, applied in the order given.", ""]
    out += ["| type | keys (default) | what it does |", "|---|---|---|"]
    out += [f"| `{name}` | {_keys(cls)} | {_first_sentence(cls)} |" for name, cls in FILTER_TYPES.items()]
    out += ["", "### `[backends]`", "", '`use` lists the backends (default `["local"]`); `[backends.<name>]` holds the settings of one.', ""]
    out += ["| backend | keys (default) | page |", "|---|---|---|"]
    for name in backend_types():
        out.append(f"| `{name}` | {_keys(backend_class(name))} | {_PAGES.get(name, '')} |")
    return "\n".join(out) + "\n"


_PAGES = {
    "local": "[local files](trackers/local.md)",
    "tensorboard": "[local files](trackers/local.md)",
    "console": "[local files](trackers/local.md)",
    "memory": "[local files](trackers/local.md)",
    "mlflow": "[MLflow](trackers/mlflow.md)",
    "wandb": "[W&B](trackers/wandb.md)",
    "neptune": "[Neptune](trackers/neptune.md)",
    "trackio": "[trackio](trackers/trackio.md)",
}


def _keys(cls: type) -> str:
    params = inspect.signature(cls).parameters.values()
    shown = [f"`{p.name}`" + ("" if p.default is inspect.Parameter.empty else f" ({_value(p.default)})") for p in params]
    return ", ".join(shown) or "none"


def _value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return "`[" + ", ".join(repr(v).replace("'", '"') for v in value) + "]`"
    return "`" + repr(value).replace("'", '"') + "`"


def _first_sentence(cls: type) -> str:
    return _cell((inspect.getdoc(cls) or "").split("\n\n")[0])


def _cell(text: str) -> str:
    """`text` as one Markdown table cell: one line, `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")
