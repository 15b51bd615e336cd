"""What every command-line entry point shares: its parser, progress lines, one summary line, one error line.

A job built with :func:`job_parser` shows every option with its default in ``--help`` and refuses a
bad number before Spark starts (argparse's usage line and exit code 2). :func:`run_job` runs the job's
body with a :class:`Progress` that logs to stderr what it is doing and for how long, prints the one
summary line the body returns, and turns a failure into one line on stderr (exit code 2 for what the
store refused, 1 for anything else; never a traceback) that says rerunning is safe: every job
commits its work atomically, so a failed or killed run leaves nothing half-written.

>>> parser = job_parser("Dispatch job: build consume queue and index rows.")
>>> parser.add_argument("--batch", type=positive_int, default=10, help="rows per batch")  # doctest: +ELLIPSIS
_StoreAction(...)
>>> parser.parse_args(["--store", "/tmp/s"]).batch
10
>>> run_job("demo", lambda progress: "did 3 things")
did 3 things
0
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

from storelib.model.errors import StoreError

__all__ = ["job_parser", "positive_int", "non_negative_int", "Progress", "NothingFound", "run_job"]


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help, the description kept as written."""


def job_parser(doc: str, *, store: bool = True) -> argparse.ArgumentParser:
    """A parser for a job whose docstring is ``doc`` (first line: the description, the rest: the epilog),
    with ``--store`` (required) and ``--create``, unless ``store`` is False.

    >>> "--create" in job_parser("A job.").format_help()
    True
    """
    first, _, rest = doc.strip().partition("\n")
    parser = argparse.ArgumentParser(description=first, epilog=rest.strip() or None, formatter_class=_Help)
    if store:
        parser.add_argument("--store", required=True, help="root folder or URI of the store")
        parser.add_argument("--create", action="store_true", help="create the store if the path holds none")
    return parser


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1.

    >>> positive_int("5")
    5
    >>> positive_int("-5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 1, got '-5'
    """
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0.

    >>> non_negative_int("0")
    0
    """
    return _int_at_least(text, 0)


def _int_at_least(text: str, lo: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if value < lo:
        raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
    return value


class Progress:
    """Progress lines of one job on stderr: ``[job 12.3s] what it is doing``.

    >>> import io; out = io.StringIO()
    >>> Progress("dispatch", out, clock=lambda: 0.0).say("reading the commitlog")
    >>> out.getvalue()
    '[dispatch 0.0s] reading the commitlog\\n'
    """

    def __init__(self, job: str, stream=None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.job, self.stream, self.clock = job, stream, clock
        self.started = clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def say(self, message: str) -> None:
        print(f"[{self.job} {self.elapsed:.1f}s] {message}", file=self.stream or sys.stderr, flush=True)


class NothingFound(LookupError):
    """What a command looked for is not there: said in one line on stderr, exit code 1 (as ``grep``)."""


def run_job(job: str, body: Callable[[Progress], str | None], *, writes: bool = True) -> int:
    """Run ``body``; print the summary line it returns (if any) and return 0, or print one line saying what
    failed and return 2 (a :class:`~storelib.model.errors.StoreError`), 1 (:class:`NothingFound`, or
    anything else) or 130 (interrupted). A job that ``writes`` adds that rerunning is safe. A reader that
    closes the output early (``| head``) is no failure of the job: :data:`READER_GONE` (141), and no claim
    that nothing was written.

    >>> run_job("demo", lambda progress: 1 / 0)
    1
    >>> def lookup(progress):
    ...     raise NothingFound("no message with key 'k' in topic TopicTest")
    >>> run_job("query", lookup, writes=False)
    1
    """
    progress = Progress(job)
    safe = " Nothing was half-written; rerunning is safe." if writes else ""
    try:
        summary = body(progress)
        if summary is not None:
            print(summary, flush=True)
        sys.stdout.flush()  # what the verb printed, while a closed pipe is still ours to answer
    except BrokenPipeError:
        return _reader_gone(job)
    except NothingFound as e:
        print(f"not found: {e}", file=sys.stderr)
        return 1
    except StoreError as e:
        print(f"{job} failed: {e}.{safe}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{job} interrupted after {progress.elapsed:.1f}s.{safe}", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (a job ends in one line, never a traceback)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"{job} failed: {type(e).__name__}: {first}.{safe}", file=sys.stderr)
        return 1
    return 0


#: The exit code of a command whose reader closed its output (a shell's for a process ended by SIGPIPE).
READER_GONE = 141


def _reader_gone(job: str) -> int:
    """The reader of stdout went away (``| head``): what the command did stands, only its output was cut.
    Says so in one line, and points stdout at nothing so the interpreter's last flush fails no more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    print(
        f"{job}: the reader closed the output before all of it was written; what the command did stands",
        file=sys.stderr,
    )
    return READER_GONE
