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
from importlib import import_module
from typing import Any, Callable

from storelib.admin.output import Output
from storelib.cli import Progress, run_job
from storelib.model.config import SPARK_CONF_PREFIX, StoreConfig
from storelib.store import MessageStore

__all__ = ["build_parser", "main", "Verb", "add_verb"]

#: A verb: what it does with the opened store; returns its summary line, or None when it printed its answer.
Verb = Callable[[MessageStore, argparse.Namespace, Any, Progress], "str | None"]

#: Where the verbs live, in the order ``--help`` lists them.
VERB_MODULES = (
    "storelib.admin.topics",
    "storelib.admin.messages",
    "storelib.admin.consumers",
    "storelib.admin.upkeep",
    "storelib.admin.serving",
)


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help, descriptions kept as written."""


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    env = os.environ.get("STORELIB_STORE")
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
) -> argparse.ArgumentParser:
    """Register verb ``name`` (under ``prefix``, as ``topic`` is for ``topic create``): ``doc``'s first
    line is its one-line help, the rest its description; ``writes`` says a failure leaves nothing
    half-written; ``create`` adds ``--create``; a verb that ``opens`` nothing gets ``None`` for the store.

    >>> top = argparse.ArgumentParser(); sub = top.add_subparsers()
    >>> add_verb(sub, "hello", lambda *a: "hi", "Say hi.").prog.endswith("hello")
    True
    """
    first, _, rest = doc.strip().partition("\n")
    parser = sub.add_parser(name, help=first, description=doc.strip(), parents=[_common()], formatter_class=_Help)
    if create:
        parser.add_argument("--create", action="store_true", help="create the store if the path holds none")
    parser.set_defaults(run=run, verb=f"{prefix} {name}".strip(), writes=writes, opens=opens)
    return parser


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


def main(argv: list[str] | None = None) -> int:
    """Run the command with ``argv`` (default: the process's arguments); returns the exit code.

    >>> main(["topic", "list", "--store", store.root])
    topic      read_queues  write_queues  perm  order  cluster_by  retention_ms
    ---------  -----------  ------------  ----  -----  ----------  ------------
    TopicTest            4             4  RW-   false  TAGS
    0
    """

    args = build_parser().parse_args(argv)
    out = Output(as_json=args.json)

    def body(progress: Progress) -> str | None:
        if not args.opens:
            summary = args.run(None, args, out, progress)
        else:
            settings = StoreConfig.from_mapping({SPARK_CONF_PREFIX + k: v for k, v in args.settings})
            changed = {k: getattr(settings, k) for k, _ in args.settings}
            with MessageStore.open(
                args.store,
                create=getattr(args, "create", False),
                storage_options=dict(args.storage_options) or None,
                **changed,
            ) as store:
                summary = args.run(store, args, out, progress)
        if summary is not None:
            out.summary(summary)
        return None

    return run_job(f"storelib {args.verb}", body, writes=args.writes)
