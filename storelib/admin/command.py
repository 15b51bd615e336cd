"""The ``storelib`` command's parser and its one run loop: open the store, run the verb, say what happened.

Every verb takes ``--store PATH`` (default ``$STORELIB_STORE``) and ``--json``. Verbs are registered
by the modules beside this one, a group of verbs each (:data:`VERB_MODULES`); each verb is a function
``(store, args, out, progress) -> summary line or None``. The store is opened without starting Spark;
a verb that needs Spark starts it when it first asks (:attr:`storelib.context.StoreContext.spark`).

>>> parser = build_parser()
>>> args = parser.parse_args(["topic", "list", "--store", "/tmp/s", "--json"])
>>> args.verb, args.store, args.json
('topic list', '/tmp/s', True)
"""

from __future__ import annotations

import argparse
import os
import re
from importlib import import_module
from typing import Any, Callable, Sequence

from storelib.admin.output import Output
from storelib.cli import Progress, run_job
from storelib.model.config import SPARK_CONF_PREFIX, StoreConfig
from storelib.store import MessageStore

__all__ = ["build_parser", "main", "Verb", "add_verb", "check_flags", "open_store", "plain"]

#: A verb: what it does with the opened store; returns its summary line, or None when it printed its answer.
Verb = Callable[[MessageStore, argparse.Namespace, Any, Progress], "str | None"]

#: Where the verbs live, in the order ``--help`` lists them.
VERB_MODULES = (
    "storelib.admin.stores",
    "storelib.admin.topics",
    "storelib.admin.messages",
    "storelib.admin.consumers",
    "storelib.admin.upkeep",
    "storelib.admin.sql_files",
    "storelib.admin.serving",
)


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help, descriptions kept as written."""


def _common(store: bool = True) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    env = os.environ.get("STORELIB_STORE")
    if store:
        common.add_argument(
            "--store",
            default=env,
            required=env is None,
            help="root folder or URI of the store ($STORELIB_STORE when not given)",
        )
    common.add_argument(
        "--storage-option",
        action="append",
        default=[],
        type=storage_option,
        metavar="KEY=VALUE",
        dest="storage_options",
        help="an option reaching an object-store root (deltalake's keys: "
        "AWS_ENDPOINT_URL=..., AWS_REGION=...), over the standard AWS_* variables; repeatable",
    )
    common.add_argument(
        "--set",
        action="append",
        default=[],
        type=storage_option,
        metavar="SETTING=VALUE",
        dest="settings",
        help="a store setting for this run (StoreConfig's names: transaction_check_interval_ms=1000, ...); repeatable",
    )
    common.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    return common


def storage_option(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE``.

    >>> storage_option("AWS_REGION=eu-west-1")
    ('AWS_REGION', 'eu-west-1')
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_verb(
    sub: "argparse._SubParsersAction",
    name: str,
    run: Verb,
    doc: str,
    *,
    writes: bool = False,
    create: bool = False,
    opens: bool = True,
    prefix: str = "",
    store: bool = True,
    conflicts: Sequence[tuple[str, str]] = (),
    needs: Sequence[tuple[str, str]] = (),
) -> argparse.ArgumentParser:
    """Register verb ``name`` (under ``prefix``, as ``topic`` is for ``topic create``): ``doc``'s first
    line is its one-line help, the rest its description; ``writes`` says a failure leaves nothing
    half-written; ``create`` adds ``--create``; a verb that ``opens`` nothing gets ``None`` for the store;
    one without ``store`` takes no ``--store``. Options named in a pair of ``conflicts`` are refused together,
    the first of a pair of ``needs`` without the second (exit code 2, before anything is opened).

    >>> top = argparse.ArgumentParser(); sub = top.add_subparsers()
    >>> add_verb(sub, "hello", lambda *a: "hi", "Say hi.").prog.endswith("hello")
    True
    """
    doc = plain(doc)
    first, _, rest = doc.strip().partition("\n")
    parser = sub.add_parser(name, help=first, description=doc.strip(), parents=[_common(store)], formatter_class=_Help)
    if create:
        parser.add_argument("--create", action="store_true", help="create the store if the path holds none")
    parser.set_defaults(
        run=run,
        verb=f"{prefix} {name}".strip(),
        writes=writes,
        opens=opens,
        flag_rules=(parser, tuple(conflicts), tuple(needs)),
    )
    return parser


def plain(text: str) -> str:
    """A docstring as a terminal shows it: reST's literals and roles as plain words.

    >>> plain("``send --file`` reads :class:`~storelib.model.message.Message` lines")
    'send --file reads Message lines'
    """
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


def check_flags(args: argparse.Namespace) -> None:
    """Refuse options given together that do not go together (the parser's usage line, exit code 2): the
    verb's ``conflicts`` and ``needs`` (:func:`add_verb`). An option counts as given when its value is
    not its default.

    >>> args = build_parser().parse_args(["pull", "G", "T", "0", "--tag", "a", "--sql", "b > 1", "--store", "/s"])
    >>> check_flags(args)
    Traceback (most recent call last):
    ...
    SystemExit: 2
    """
    parser, conflicts, needs = args.flag_rules
    defaults = {a.dest: a.default for a in parser._actions}
    given = {dest for dest, default in defaults.items() if getattr(args, dest, default) != default}
    flag = {a.dest: "/".join(a.option_strings) or a.dest for a in parser._actions}
    for a, b in conflicts:
        if a in given and b in given:
            parser.error(f"{flag[a]} and {flag[b]} cannot be given together")
    for a, b in needs:
        if a in given and b not in given:
            parser.error(f"{flag[a]} needs {flag[b]}")


def _version() -> str:
    """The installed storelib's version (``unknown`` where it runs from a tree that was never installed).

    >>> _version().count(".") >= 1 or _version() == "unknown"
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("storelib")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The command's parser: every verb of :data:`VERB_MODULES`, each with ``--help`` showing its defaults."""

    parser = argparse.ArgumentParser(
        prog="storelib",
        formatter_class=_Help,
        description="Administer a storelib message store (RocketMQ's CommitLog, ConsumeQueue and IndexFile as "
        "Delta tables), in the spirit of RocketMQ's mqadmin.",
        epilog="Exit codes: 0 done, 1 not found (said on stderr), 2 refused input or a store error (one line "
        "on stderr). Look-ups, pulls and offsets answer without starting Spark.",
    )
    parser.add_argument("--version", action="version", version=f"storelib {_version()}")
    sub = parser.add_subparsers(title="verbs", metavar="VERB", required=True)
    for name in VERB_MODULES:
        import_module(name).register(sub)
    return parser


def open_store(args: argparse.Namespace) -> MessageStore:
    """The store a verb's arguments name (``--store``, ``--create``, ``--storage-option``, ``--set``), opened
    without starting Spark: for a verb that ``opens`` nothing itself and opens the store when it is ready to.

    >>> open_store(build_parser().parse_args(["inspect", "--store", store.root])).root == store.root
    True
    """
    settings = StoreConfig.from_mapping({SPARK_CONF_PREFIX + k: v for k, v in args.settings})
    changed = {k: getattr(settings, k) for k, _ in args.settings}
    return MessageStore.open(
        args.store,
        create=getattr(args, "create", False),
        storage_options=dict(args.storage_options) or None,
        **changed,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the command with ``argv`` (default: the process's arguments); returns the exit code.

    >>> main(["topic", "list", "--store", store.root])
    topic      read_queues  write_queues  perm  order  cluster_by  retention_ms
    ---------  -----------  ------------  ----  -----  ----------  ------------
    TopicTest            4             4  RW-   false  TAGS
    0
    """

    args = build_parser().parse_args(argv)
    check_flags(args)
    out = Output(as_json=args.json)

    def body(progress: Progress) -> str | None:
        if not args.opens:
            summary = args.run(None, args, out, progress)
        else:
            with open_store(args) as store:
                summary = args.run(store, args, out, progress)
        if summary is not None:
            out.summary(summary)
        return None

    return run_job(f"storelib {args.verb}", body, writes=args.writes)
