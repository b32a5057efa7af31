"""``python -m jobs sql`` with no query: an interactive SQL shell over the lakehouse tables.

Like psql: a statement runs when a line ends with ``;``, and backslash commands ask about the
warehouse. History is kept across sessions (``$RMQ_SQL_HISTORY``, default
``~/.rmq_sql_history``) and Tab completes table names, columns of the tables named so far,
saved query names and the backslash commands. Fed from a pipe instead of a terminal it
prints no prompts, so a script of statements runs as it would typed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from jobs.query.engine import Column, Engine
from jobs.query.output import FORMATS, TABLE_ROWS, write_result
from jobs.query.saved import QueryError, parse_parameters, saved_queries

HELP = """\
  SQL ending in ;           run it (tables are rmq.<table>)
  \\d                        list the tables
  \\d TABLE                  a table's columns: type, null, comment
  \\saved                    list the saved queries
  \\saved NAME [KEY=VALUE]   run a saved query with its parameters
  \\format table|csv|jsonl   how results print
  \\limit N                  rows a table result prints (0: all)
  \\q                        quit (or Ctrl-D)"""
COMMANDS = ("\\d", "\\saved", "\\format", "\\limit", "\\q", "\\?")
PROMPT, CONTINUED = "rmq=> ", "rmq-> "


class SqlShell:
    def __init__(self, engine: Engine, out: TextIO = sys.stdout, fmt: str = "table",
                 limit: int | None = TABLE_ROWS) -> None:
        self.engine, self.out, self.fmt, self.limit = engine, out, fmt, limit
        self._buffer: list[str] = []
        self._columns_seen: dict[str, list[str]] = {}

    # ---------------------------------------------------------------- the loop
    def run(self) -> None:
        """Read and handle lines until ``\\q`` or end of input."""
        interactive = sys.stdin.isatty()
        if interactive:
            _enable_readline(self.complete)
            print(f"rmq SQL ({self.engine.name} engine). \\? for help, "
                  "\\q to quit.", file=self.out)
        reader = input if interactive else _plain_input
        while True:
            try:
                line = reader(CONTINUED if self._buffer else PROMPT)
            except EOFError:
                break
            except KeyboardInterrupt:  # Ctrl-C drops the statement being typed
                self._buffer.clear()
                print(file=self.out)
                continue
            if not self.handle(line):
                break
        if interactive:
            _save_history()

    def handle(self, line: str) -> bool:
        """Handle one input line; False when the shell should end."""
        stripped = line.strip()
        if not self._buffer and stripped.startswith("\\"):
            return self._command(stripped)
        if stripped:
            self._buffer.append(line)
        if stripped.endswith(";"):
            sql = "\n".join(self._buffer).rstrip().rstrip(";")
            self._buffer.clear()
            self._show(lambda: self.engine.query(sql))
        return True

    # ---------------------------------------------------------------- backslash commands
    def _command(self, text: str) -> bool:
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name == "\\q":
            return False
        if name == "\\d":
            self._describe(rest)
        elif name == "\\saved":
            self._saved(rest)
        elif name == "\\format" and rest in FORMATS:
            self.fmt = rest
        elif name == "\\limit" and rest.isdigit():
            self.limit = int(rest) or None
        elif name == "\\?":
            print(HELP, file=self.out)
        else:
            print(f"unknown command {text!r}; \\? lists the commands", file=self.out)
        return True

    def _describe(self, table: str) -> None:
        table = table.removeprefix("rmq.").strip('"')
        if not table:
            for name in self.engine.tables():
                print(f"rmq.{name}", file=self.out)
            return
        self._show(lambda: _columns_table(self.engine.columns(table)), as_table=True)

    def _saved(self, rest: str) -> None:
        if not rest:
            for query in saved_queries().values():
                params = " ".join(f"[{p}=...]" if p in query.defaults else f"{p}=..."
                                  for p in query.parameters)
                print(f"{query.name} {params}".rstrip() + f"\n    {query.description}",
                      file=self.out)
            return
        name, *items = rest.split()
        self._show(lambda: self.engine.saved(name, parse_parameters(items)))

    def _show(self, result: Callable[[], pa.Table], *, as_table: bool = False) -> None:
        """Print what ``result`` returns, or the one-line error it raised."""
        try:
            table = result()
        except QueryError as error:
            print(f"error: {error}", file=self.out)
            return
        if as_table:
            write_result(table, self.out, "table")
        else:
            write_result(table, self.out, self.fmt, self.limit)

    # ---------------------------------------------------------------- completion
    def candidates(self, text: str, line: str) -> list[str]:
        """What Tab may complete ``text`` to, given the whole ``line`` so far."""
        if line.lstrip().startswith("\\saved"):
            pool = list(saved_queries())
        elif text.startswith("\\"):
            pool = list(COMMANDS)
        else:
            tables = self.engine.tables()
            pool = [f"rmq.{t}" for t in tables] + tables
            for table in tables:
                if f"rmq.{table}" in line.lower():
                    pool += self._columns(table)
        return sorted({c for c in pool if c.startswith(text)})

    def complete(self, text: str, state: int) -> str | None:
        """readline's completer: the ``state``-th candidate for ``text``."""
        import readline

        options = self.candidates(text, readline.get_line_buffer())
        return options[state] if state < len(options) else None

    def _columns(self, table: str) -> list[str]:
        if table not in self._columns_seen:
            self._columns_seen[table] = [c.name for c in self.engine.columns(table)]
        return self._columns_seen[table]


def _columns_table(columns: list[Column]) -> pa.Table:
    return pa.table({"column": [c.name for c in columns], "type": [c.type for c in columns],
                     "null": ["yes" if c.nullable else "no" for c in columns],
                     "comment": [c.comment for c in columns]})


def _plain_input(prompt: str) -> str:
    """A line from a non-terminal stdin, without echoing a prompt."""
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _history_file() -> Path:
    return Path(os.environ.get("RMQ_SQL_HISTORY") or Path.home() / ".rmq_sql_history")


def _enable_readline(completer: Callable[[str, int], str | None]) -> None:
    import readline

    readline.set_completer(completer)
    readline.set_completer_delims(" \t\n(),;=<>")
    readline.parse_and_bind("tab: complete")
    with contextlib.suppress(OSError):  # no history yet
        readline.read_history_file(_history_file())


def _save_history() -> None:
    import readline

    readline.set_history_length(2000)
    with contextlib.suppress(OSError):  # a read-only home: history is a convenience
        readline.write_history_file(_history_file())
