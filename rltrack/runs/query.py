"""Queries over the index: `query(root, where=..., task=..., sort=...) -> DataFrame`.

`where` is a Python expression checked with `ast` and translated to SQL with
bound parameters; it is never evaluated. What it may contain:

    names           a column of the index row: `lr`, `env_id`, `status`, `task`;
                    `a/b/c` (written as a division of names) is the column
                    `a/b/c`: `evaluator/reward_mean`, `best/evaluator/reward_mean`,
                    `policy_kwargs/gamma`; `col("any name")` for names that are not identifiers
    constants       numbers, strings, True, False, None
    comparisons     < <= > >= == != (chains too: `1e-4 <= lr < 1e-2`), `in` / `not in` a list or tuple;
                    `== None` / `!= None` test for a missing value
    logic           and, or, not, parentheses

A name that no run has is an error naming the columns that exist, rather than
an empty answer.

`sort` is a comma-separated list of column names, each optionally prefixed
with `-` for descending; missing values sort last either way.
"""

from __future__ import annotations

import ast
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltrack.runs.index import RUN_COLUMNS, connect, refresh

if TYPE_CHECKING:
    import pandas as pd

_COMPARISONS: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "=", ast.NotEq: "<>"}
_SYNTAX = "names, a/b column names, col('name'), constants, comparisons, in, and, or, not"


class QueryError(ValueError):
    """A `where` or `sort` that cannot be used, with what is wrong and how to write it."""


class _Translator:
    """One `where` expression -> SQL text + parameters, over runs `r` and fields."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.params: list[Any] = []

    def column(self, name: str) -> str:
        if name in RUN_COLUMNS:
            return f'r."{name}"'
        if name not in self.known:
            raise QueryError(f"unknown column {name!r}; the indexed runs have: {', '.join(sorted(self.known | set(RUN_COLUMNS)))}")
        self.params.append(name)
        return "(SELECT f.value FROM fields f WHERE f.run = r.rowid AND f.name = ?)"

    def sql(self, node: ast.AST) -> str:
        if isinstance(node, ast.BoolOp):
            joiner = " AND " if isinstance(node.op, ast.And) else " OR "
            return "(" + joiner.join(self.sql(v) for v in node.values) + ")"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"(NOT {self.sql(node.operand)})"
        if isinstance(node, ast.Compare):
            return self.compare(node)
        name = column_name(node)
        if name is not None:  # a bare column: true when set and not zero/empty
            return f"(COALESCE({self.column(name)}, 0) NOT IN (0, ''))"
        raise QueryError(f"cannot use {ast.unparse(node)!r} as a condition; a where may contain {_SYNTAX}")

    def compare(self, node: ast.Compare) -> str:
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(self.pair(left, op, right))
            left = right
        return "(" + " AND ".join(parts) + ")"

    def pair(self, left: ast.AST, op: ast.cmpop, right: ast.AST) -> str:
        if isinstance(op, (ast.In, ast.NotIn)):
            if not isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                raise QueryError(f"`in` needs a list of constants, got {ast.unparse(right)!r}")
            lhs = self.operand(left)
            holes = ", ".join(self.operand(item) for item in right.elts)
            return f"({lhs} {'NOT IN' if isinstance(op, ast.NotIn) else 'IN'} ({holes}))"
        if type(op) not in _COMPARISONS:
            raise QueryError(f"unsupported comparison {type(op).__name__}; use < <= > >= == != in, not in")
        if _is_none(right) or _is_none(left):
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                raise QueryError("None can only be compared with == or !=")
            other = left if _is_none(right) else right
            return f"({self.operand(other)} IS {'NOT ' if isinstance(op, ast.NotEq) else ''}NULL)"
        return f"({self.operand(left)} {_COMPARISONS[type(op)]} {self.operand(right)})"

    def operand(self, node: ast.AST) -> str:
        name = column_name(node)
        if name is not None:
            return self.column(name)
        value = _constant(node)
        self.params.append(int(value) if isinstance(value, bool) else value)
        return "?"


def column_name(node: ast.AST) -> str | None:
    """`lr` -> "lr"; `evaluator/reward_mean` -> "evaluator/reward_mean"; `col("x-y")` -> "x-y"; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = column_name(node.left), column_name(node.right)
        if left is not None and right is not None:
            return f"{left}/{right}"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "col"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _constant(node: ast.AST) -> Any:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Constant):
        value = _constant(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int, float, str))):
        return node.value
    raise QueryError(f"{ast.unparse(node)!r} is neither a column nor a constant; a where may contain {_SYNTAX}")


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def where_sql(where: str, known: set[str]) -> tuple[str, list[Any]]:
    """SQL for `where` (see the module docstring) and its parameters; QueryError when it cannot be used."""
    try:
        tree = ast.parse(where.strip(), mode="eval")
    except SyntaxError as exc:
        raise QueryError(f"where {where!r} is not an expression ({exc.msg}); e.g. \"lr < 0.01 and env_id == 'CartPole-v1'\"") from None
    translator = _Translator(known)
    return translator.sql(tree.body), translator.params


def order_sql(sort: str, known: set[str]) -> tuple[str, list[Any]]:
    """ORDER BY terms for "a,-b" and their parameters."""
    translator = _Translator(known)
    terms = []
    for item in (s.strip() for s in sort.split(",")):
        if not item:
            continue
        descending = item.startswith("-")
        terms.append(f"{translator.column(item.lstrip('+-').strip())} {'DESC' if descending else 'ASC'} NULLS LAST")
    return ", ".join(terms), translator.params


def field_names(db: sqlite3.Connection) -> set[str]:
    """Every fields name some run has (an index scan of fields_by_name)."""
    return {row[0] for row in db.execute("SELECT DISTINCT name FROM fields")}


def select(db: sqlite3.Connection, where: str | None = None, task: str | None = None, sort: str | None = None,
           archived: bool | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """The matching runs as dicts (runs columns, then the run's fields) and the field names present, sorted."""
    rows, fields = select_rows(db, where, task, sort, archived)
    names = sorted({name for run_fields in fields for name in run_fields})
    return names, [{**dict(zip(RUN_COLUMNS, row)), **run_fields} for row, run_fields in zip(rows, fields)]


def select_rows(db: sqlite3.Connection, where: str | None = None, task: str | None = None, sort: str | None = None,
                archived: bool | None = None) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """The matching runs: their RUN_COLUMNS values, and their fields (one dict per run,
    parsed from the stored JSON in one call: 10,000 runs are one `json.loads`)."""
    known = field_names(db)
    clauses, params = [], []
    if where:
        sql, where_params = where_sql(where, known)
        clauses.append(sql)
        params += where_params
    if task:
        clauses.append("r.task GLOB ?" if any(c in task for c in "*?[") else "r.task = ?")
        params.append(task)
    if archived is not None:
        clauses.append("r.archived = ?")
        params.append(int(archived))
    order, order_params = order_sql(sort, known) if sort else ("", [])
    selected = ", ".join(f'r."{c}"' for c in RUN_COLUMNS)
    sql = f"SELECT {selected}, r.fields_json FROM runs r"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += f" ORDER BY {order + ', ' if order else ''}r.start_unix, r.path"
    found = db.execute(sql, params + order_params).fetchall()
    fields = json.loads("[" + ",".join(row[-1] for row in found) + "]")
    return [row[:-1] for row in found], fields


def query(root: str | Path, where: str | None = None, task: str | None = None, sort: str | None = None,
          archived: bool | None = None, refresh_index: bool = True) -> pd.DataFrame:
    """One row per run under `root` that matches: the index row's columns (RUN_COLUMNS),
    then hyperparameters and main metrics (`<metric>`, `best/<metric>`) by name.
    `archived`: None for all runs, False / True for only live / only archived ones.
    `refresh_index=False` answers from the index as it is, without looking at the directories."""
    import pandas as pd

    root = Path(root)
    if refresh_index:
        refresh(root)
    with closing(connect(root)) as db:
        rows, fields = select_rows(db, where, task, sort, archived)
    table = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    if not fields:
        return table
    values = pd.DataFrame(fields)
    return pd.concat([table, values[sorted(values.columns)]], axis=1)
