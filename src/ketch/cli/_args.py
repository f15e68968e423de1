"""Argument parsing for the ``ketch`` commands: one-line errors and typed option values.

A bad option value ends the command with exit code 2 and one line on stderr that names
the option, the bad value and what is allowed (``ketch: argument --max-turns: expected a
positive integer, got 'banana' (see ketch run --help)``), never argparse's usage block
or the name of an internal function.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Literal
from typing import NoReturn
from typing import TypeAlias
from typing import get_args

OutputFormat: TypeAlias = Literal["text", "json", "stream-json"]
"""The headless output formats (``ketch run -o``)."""
OUTPUT_FORMATS: tuple[OutputFormat, ...] = get_args(OutputFormat)

EXIT_USAGE = 2
"""Usage and configuration errors."""
EXIT_INTERRUPTED = 130
"""Interrupted (SIGINT, as a shell reports it), and the exit code of an aborted run."""
EXIT_BROKEN_PIPE = 141
"""Exit code when stdout was closed early: 128 + SIGPIPE, what a shell reports for a Unix
tool that SIGPIPE stopped."""


def silence_stdout() -> None:
    """Point file descriptor 1 at ``/dev/null``, so that nothing more written to stdout
    (the interpreter's final flush included) fails once its reader is gone."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


class OneLineParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line and exit with 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line (and where the help is) and exit with code 2."""
        sys.stderr.write(f"ketch: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def finite_non_negative(text: str) -> float:
    """A finite number of at least 0 (not ``nan`` or ``inf``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def add_permission_options(
    parser: argparse.ArgumentParser, *, modes: str = "", allow_example: str = "Bash(git status)"
) -> None:
    """``--permission-mode`` and ``--allow``, as every command that runs an agent takes
    them; ``modes`` is said after the list of modes, ``allow_example`` is the example rule."""
    from ..permissions import PERMISSION_MODES

    parser.add_argument(
        "--permission-mode",
        choices=(*PERMISSION_MODES, "accept-edits"),
        help="default | accept_edits | plan | bypass" + (f" ({modes})" if modes else ""),
    )
    parser.add_argument(
        "--allow", action="append", metavar="RULE", help=f"allow rule, e.g. '{allow_example}' (repeatable)"
    )
