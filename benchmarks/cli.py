"""The option parser every benchmark program uses, so that each one run as
``adcompile bench NAME`` (or ``python -m benchmarks.run NAME``) shows its own
name in its usage and help, and says a usage error in one line, as the
``adcompile`` command does.

Imports nothing but ``argparse``: ``benchmarks.first_call`` times the import
of adcompile in its child processes, after this module is loaded.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line on stderr (exit status 2)
    that names the program and its ``--help``."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser(prog: str | None, default: str, description: str) -> Parser:
    """The parser of a benchmark program: ``prog`` as its caller names it
    (``adcompile bench first-call``), else ``default`` (``python -m benchmarks.first_call``)."""
    return Parser(prog=prog or default, description=description)
