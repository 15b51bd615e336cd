"""What every command-line entry point shares: its parser, progress lines, one summary line, one error line.

A job built with :func:`job_parser` shows every option with its default in ``--help`` and refuses a
bad number before Spark starts (argparse's usage line and exit code 2). :func:`run_job` runs the job's
body with a :class:`Progress` that logs to stderr what it is doing and for how long, prints the one
summary line the body returns, and turns a failure into one line on stderr (exit code 2 for what the
store refused, 1 for anything else; never a traceback) that says rerunning is safe: every job
commits its work atomically, so a failed or killed run leaves nothing half-written. A body that failed
after it committed something a rerun would do again (a send, a consumer offset) said so with
:meth:`Progress.committed`: that failure is :data:`FAILED_AFTER_COMMIT` (3), in words that say what stands
and what a rerun would do.

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
import datetime as dt
import os
import sys
import time
from typing import Callable

from storelib.model.errors import StoreError

__all__ = [
    "job_parser",
    "positive_int",
    "non_negative_int",
    "time_ms",
    "Progress",
    "NothingFound",
    "run_job",
    "READER_GONE",
    "FAILED_AFTER_COMMIT",
]


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


def time_ms(text: str) -> int:
    """An argparse type: a time, as epoch milliseconds or an ISO 8601 time (UTC unless it names a zone);
    returns epoch milliseconds.

    >>> time_ms("1795588200123"), time_ms("2026-11-25T06:30:00.123"), time_ms("2026-11-25 07:30:00.123+01:00")
    (1795588200123, 1795588200123, 1795588200123)
    >>> time_ms("yesterday")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be epoch milliseconds or an ISO 8601 time (2026-11-25T06:30:00), got 'yesterday'
    """
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be epoch milliseconds or an ISO 8601 time (2026-11-25T06:30:00), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return (when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(milliseconds=1)


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
        #: What the job committed that a rerun would do again, and what a rerun would do (see :meth:`committed`).
        self.done: tuple[str, str] | None = None

    def committed(self, what: str, rerun: str) -> None:
        """Say that ``what`` is committed and that a rerun would not simply redo nothing (``rerun``: what it
        would do): from here on, a failure is :data:`FAILED_AFTER_COMMIT`, never "rerunning is safe".

        >>> p = Progress("send"); p.committed("5 messages sent", "rerunning sends them again"); p.done[0]
        '5 messages sent'
        """
        self.done = (what, rerun)

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
    that nothing was written. A failure (or an interruption) after the body said :meth:`Progress.committed`
    is :data:`FAILED_AFTER_COMMIT`, in its own words.

    >>> run_job("demo", lambda progress: 1 / 0)
    1
    >>> def lookup(progress):
    ...     raise NothingFound("no message with key 'k' in topic TopicTest")
    >>> run_job("query", lookup, writes=False)
    1
    >>> def sent_then_failed(progress):
    ...     progress.committed("3 messages sent", "rerunning sends them again")
    ...     raise RuntimeError("the printer caught fire")
    >>> run_job("send", sent_then_failed)
    3
    """
    progress = Progress(job)
    safe = " Nothing was half-written; rerunning is safe." if writes else ""
    try:
        summary = body(progress)
        if summary is not None:
            print(summary, flush=True)
        sys.stdout.flush()  # what the verb printed, while a closed pipe is still ours to answer
    except BrokenPipeError:
        return _reader_gone(job, progress.done)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001  (a job ends in one line, never a traceback)
        if progress.done is not None:
            return _failed_after_commit(job, progress.done, e)
        return _failed(job, e, progress, safe)
    return 0


def _failed(job: str, e: BaseException, progress: Progress, safe: str) -> int:
    """One line for a failure before anything was committed: exit code 1, 2 or 130."""
    if isinstance(e, NothingFound):
        print(f"not found: {e}", file=sys.stderr)
        return 1
    if isinstance(e, StoreError):
        print(f"{job} failed: {e}.{safe}", file=sys.stderr)
        return 2
    if isinstance(e, KeyboardInterrupt):
        print(f"{job} interrupted after {progress.elapsed:.1f}s.{safe}", file=sys.stderr)
        return 130
    print(f"{job} failed: {type(e).__name__}: {_first_line(e)}.{safe}", file=sys.stderr)
    return 1


def _failed_after_commit(job: str, done: tuple[str, str], e: BaseException) -> int:
    """One line for a failure after a commit a rerun would repeat: what stands, what failed, what a rerun
    would do; :data:`FAILED_AFTER_COMMIT`."""
    if isinstance(e, OSError):
        _quiet_stdout()  # stdout itself may be what failed (a full disk): the last flush must not fail again
    what, rerun = done
    if isinstance(e, KeyboardInterrupt):
        said = f"{job} was interrupted after committing {what}"
    else:
        said = f"{job} failed after committing {what}: {type(e).__name__}: {_first_line(e)}"
    print(f"{said}. Do not simply rerun: {rerun}.", file=sys.stderr)
    return FAILED_AFTER_COMMIT


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


#: The exit code of a command whose reader closed its output (a shell's for a process ended by SIGPIPE).
READER_GONE = 141
#: The exit code of a command that failed after it committed something a rerun would do again.
FAILED_AFTER_COMMIT = 3


def _quiet_stdout() -> None:
    """Point stdout at nothing, so the interpreter's last flush of what could not be written fails no more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _reader_gone(job: str, done: tuple[str, str] | None = None) -> int:
    """The reader of stdout went away (``| head``): what the command did stands, only its output was cut.
    Says so in one line (with what was committed, and what a rerun would do), and points stdout at nothing
    so the interpreter's last flush fails no more."""
    _quiet_stdout()
    stands = f": {done[0]} ({done[1]})" if done else ""
    print(
        f"{job}: the reader closed the output before all of it was written; what the command did stands{stands}",
        file=sys.stderr,
    )
    return READER_GONE
