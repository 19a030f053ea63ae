"""The fenced code blocks of Markdown files, for the docs tests.

Why this exists: every Python and shell block of README.md and docs/ is run
by tests/docs/test_docs_blocks.py, so a renamed option or function breaks a
test instead of a reader's recipe. A block right after the line
`<!-- not run: <reason> -->` is only checked for syntax (the docs site shows
the reason, see docs/hooks/rltrack_docs.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the reason, when the block is only syntax-checked

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}:{self.lang}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of `path`, its indentation (lists, admonitions) removed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:] if lines[index][:indent].strip() == "" else lines[index])
            index += 1
        index += 1
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marker = NOT_RUN.match(previous)
        found.append(Block(path, start + 1, match["lang"].lower(), "\n".join(body) + "\n", marker["reason"] if marker else None))
    return found
