"""The `rltrack` command: look at run directories from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rltrack import __version__
from rltrack.backends.tables import format_table
from rltrack.events import NUMERIC_KINDS
from rltrack.journal import read_journal


def show(run_dir: Path) -> int:
    """Status from meta.json, then the last value of every scalar in the journal."""
    meta_path = run_dir / "meta.json"
    if not meta_path.is_file():
        print(f"rltrack: {run_dir} is not a run directory (no meta.json)", file=sys.stderr)
        return 2
    meta = json.loads(meta_path.read_text())
    print(f"{meta['name']}: {meta['status']}, started {meta['start_time']} on {meta['host']} (pid {meta['pid']})")
    last: dict[str, object] = {}
    events = 0
    for event in read_journal(run_dir):
        events += 1
        if event.kind in NUMERIC_KINDS:
            last.update({event.tag(k): v for k, v in event.data.items()})
    print(f"{events} events in the journal")
    if last:
        print(format_table("last values", last))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rltrack", description="Look at rltrack run directories.")
    parser.add_argument("--version", action="version", version=f"rltrack {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    show_cmd = commands.add_parser("show", help="status and last values of a run")
    show_cmd.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    return show(args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
