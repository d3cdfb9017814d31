"""The CLI's rich consoles, created on first use.

Importing rich and making a Console took ~30 ms of every command, and a plan written to a pipe or a file is
plain text that needs neither. A `LazyConsole` stands for a `rich.console.Console` and creates it at the first
attribute read or write; its `plain` property tells, without rich when the answer is certain, whether the
console prints without colors.

A console reads no markup unless a call asks for it (`markup=True`, its data escaped with render.escape_markup):
what the CLI prints is data (addresses, paths, Spark's error texts such as `[id = ...]`), never markup.
`print_table` prints rich's table on a terminal and a plain one, every cell whole, anywhere else.
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Sequence
from typing import IO, Any


class LazyConsole:
    """`rich.console.Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False, **options)`, made on
    first use."""

    def __init__(self, stderr: bool = False, **options: Any):
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_console", None)

    def _real(self) -> Any:
        """The rich Console, created now if needed."""
        if self._console is None:
            from rich.console import Console

            console = Console(stderr=self._stderr, highlight=False, soft_wrap=True,
                              **{"markup": False, **self._options})
            object.__setattr__(self, "_console", console)
        return self._console

    def __getattr__(self, name: str) -> Any:
        if name in ("_console", "_stderr", "_options"):  # not set yet (an instance made without __init__)
            raise AttributeError(name)
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)

    @property
    def plain(self) -> bool:
        """True when the console prints no colors (rich's `color_system` is None)."""
        if self._console is None and _surely_not_a_terminal(sys.stderr if self._stderr else sys.stdout):
            return True
        return self._real().color_system is None


def _surely_not_a_terminal(file: IO[str] | None) -> bool:
    """True when rich would find `file` is no terminal: it is not a tty, and none of what makes rich decide
    otherwise is set (FORCE_COLOR, TTY_COMPATIBLE, an IPython shell; rich.console.Console.is_terminal).
    False means "ask rich"."""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ or hasattr(builtins, "get_ipython"):
        return False
    isatty = getattr(getattr(file, "rich_proxied_file", file), "isatty", None)
    try:
        return isatty is not None and not isatty()
    except ValueError:  # a closed file: rich decides
        return False


def print_table(console: LazyConsole, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table of text cells. On a terminal rich's, folded to its width; elsewhere (a pipe, a file, a CI log)
    render.plain_table: every cell whole, one record per line, so nothing is cut into slices at 80 columns."""
    from dsflow.cli.render import plain_table

    if not console.is_terminal:
        console.file.write(plain_table(headers, rows) + "\n")
        console.file.flush()
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(*headers)
    for column in table.columns:
        column.overflow = "fold"
    for row in rows:
        table.add_row(*[Text(cell) for cell in row])  # a cell is text, never markup
    console.print(table)
