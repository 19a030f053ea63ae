"""One example per `rltrack` subcommand, shown at the end of its `--help`, and a description for each.

Kept in one table so that every command, whoever registers it, says how it is
used; `add_examples` walks the parser once every command is registered, gives
each subcommand its example (`LineFormatter` keeps its line) and, where it has
none, its one-line help as its description.
"""

from __future__ import annotations

import argparse
import textwrap

EXAMPLES = {
    "show": "rltrack show runs/cartpole_ppo",
    "sync": "rltrack sync runs/cartpole_ppo --to mlflow",
    "status": "rltrack status --json",
    "agent": "rltrack agent",
    "import": "rltrack import tensorboard runs_cleanrl/ --root runs",
    "deliver": "rltrack deliver s3://bucket/runs --share 0/2",
    "pull": "rltrack pull s3://bucket/runs runs",
    "runs": "rltrack runs ls --task 'cartpole*' --sort -best/evaluator/reward_mean",
    "runs ls": "rltrack runs ls --where \"lr < 0.01\" --columns lr,collector/reward_mean",
    "runs show": "rltrack runs show cartpole/2026/11/29 --json",
    "runs rm": "rltrack runs rm '^cartpole/2026/05/' --yes",
    "runs archive": "rltrack runs archive '^cartpole/2026/05/'",
    "runs index": "rltrack runs index --rebuild",
    "export": "rltrack export cartpole/2026/11/29 --format parquet -o tables/",
    "plot": "rltrack plot 'cartpole/' --metric collector/reward_mean --group-by lr --x env_steps -o reward.png",
    "report": "rltrack report --task cartpole -o cartpole.html",
    "compare": "rltrack compare --task 'cartpole*' --metric collector/reward_mean --group-by lr --score last:10 --json",
    "run": "rltrack run --config rltrack.toml -- python cleanrl/ppo.py --env-id CartPole-v1",
}


class LineFormatter(argparse.HelpFormatter):
    """Wraps each line of a description or epilog on its own, and leaves an indented line (an example) whole."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = text.splitlines()
        return "\n".join(indent + line if line.startswith("  ") else textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent) for line in lines)


def add_examples(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Every subcommand under `parser` gets `EXAMPLES[its name]` as its epilog (KeyError: a command without one)."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}  # argparse keeps each command's help here
        for name, command in action.choices.items():
            full = f"{prefix}{name}"
            command.description = command.description or helps.get(name)
            command.epilog = f"example:\n  {EXAMPLES[full]}"
            command.formatter_class = LineFormatter
            add_examples(command, f"{full} ")
