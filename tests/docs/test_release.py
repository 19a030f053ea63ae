"""The release's version comes from one place and the changelog follows it (issue 38).

`rltrack/core/version.py` holds the version; pyproject.toml reads it from
there (`dynamic = ["version"]`), so the installed package's metadata (the
wheel's, in CI's lanes) must say the same, and CHANGELOG.md must have a
section for it.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import rltrack

REPO = Path(__file__).parents[2]


def test_the_installed_metadata_has_the_version_of_version_py() -> None:
    assert metadata.version("rltrack") == rltrack.__version__


def test_pyproject_names_no_version_of_its_own() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"], "the version lives in rltrack/core/version.py only"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rltrack.core.version.__version__"}


def test_the_changelog_has_a_section_for_this_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"(?m)^## {re.escape(rltrack.__version__)}\b", changelog), f"CHANGELOG.md has no '## {rltrack.__version__}' section"
