"""The transaction check-back: RocketMQ's TransactionalMessageCheckService.

Details: ``docs/internals.md``, section storelib.schedule.check.

>>> from storelib import Message
>>> from storelib.schedule.transaction import send_half
>>> half = send_half(store.context, Message("TopicTest", body=b"b"), "PG")
>>> register_checker(store.context, "PG", "storelib.schedule.check:commit_all")
>>> check_transactions(store.context, now=10**13).committed
1
"""

from __future__ import annotations

import datetime as dt
import importlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.rows import append_rows
from storelib.encoding.properties import edit_properties, property_array
from storelib.filter.class_batch import message_views
from storelib.model.errors import ProgressMovedError, TransactionError
from storelib.model.message import MessageConst, StoredMessage
from storelib.model.timestamps import epoch_ms, now_ms
from storelib.model.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, validate_group
from storelib.schedule.deliver import restaged
from storelib.schedule.transaction import CHECK_MARKER, TransactionState, ended_rows, keep, pending_halves
from storelib.storage.commitlog import Progress
from storelib.storage.schema import TRANSACTION_CHECKER

__all__ = [
    "CheckResult",
    "check_transactions",
    "register_checker",
    "checker_of",
    "commit_all",
    "ask_checker",
    "ask_registered",
]


@dataclass
class CheckResult:
    """What one check-back run did: half messages checked, committed, rolled back, left UNKNOW (put
    back), given up; the checkers' errors (``transaction id: error``), the version written.

    >>> CheckResult(checked=2, committed=1, unknown=1).checked
    2
    """

    checked: int = 0
    committed: int = 0
    rolled_back: int = 0
    unknown: int = 0
    given_up: int = 0
    errors: list[str] = field(default_factory=list)
    version: int | None = None


def commit_all(message: StoredMessage) -> TransactionState:
    """A checker answering COMMIT for every message (for examples and benchmarks).

    >>> commit_all(None)
    <TransactionState.COMMIT_MESSAGE: 'COMMIT_MESSAGE'>
    """
    return TransactionState.COMMIT_MESSAGE


def register_checker(ctx: StoreContext, producer_group: str, checker: str) -> None:
    """Register ``producer_group``'s checker: ``'package.module:function'``, a callable taking a
    :class:`~storelib.model.message.StoredMessage` (the half message) and answering a
    :class:`TransactionState` (or its name). It must import here; the latest registration wins.

    >>> register_checker(store.context, "PG", "no.such.module:f")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.TransactionError: checker: can not be imported: ModuleNotFoundError: No module named 'no'
        (got 'no.such.module:f')
    """
    validate_group(producer_group, "producer_group")
    _load(checker)
    row = {"producer_group": producer_group, "checker": checker, "updated_at": dt.datetime.now(dt.timezone.utc)}
    append_rows(
        ctx.tables.transaction_checker,
        pa.Table.from_pylist([row], schema=TRANSACTION_CHECKER.arrow),
        "REGISTER_CHECKER",
    )


def _load(path: object) -> Callable[[StoredMessage], Any]:
    if not isinstance(path, str) or path.count(":") != 1:
        raise TransactionError("checker", "must be an import path 'package.module:function'", value=path)
    module, name = path.split(":")
    try:
        target = getattr(importlib.import_module(module), name)
    except Exception as e:
        raise TransactionError("checker", f"can not be imported: {type(e).__name__}: {e}", value=path) from None
    if not callable(target):
        raise TransactionError("checker", "is not callable", value=path)
    return target


def checker_of(ctx: StoreContext, producer_group: str) -> Callable[[StoredMessage], Any] | None:
    """The checker registered for ``producer_group``, or None.

    >>> checker_of(store.context, "Nobody") is None
    True
    """

    def latest(view) -> dict[str, str]:
        rows = sorted(ctx.tables.transaction_checker.read_view(view).to_pylist(), key=lambda r: r["updated_at"])
        return {r["producer_group"]: r["checker"] for r in rows}

    path = ctx.tables.transaction_checker.memo("latest", latest).get(producer_group)
    return None if path is None else _load(path)


def ask_checker(
    checker: Callable[[StoredMessage], Any] | None, messages: Sequence[Any], timeout_s: float
) -> list[tuple[TransactionState, str | None]]:
    """Each message's state from ``checker``, asked in order on one worker thread; an answer that
    raises, is no state, or takes longer than ``timeout_s`` is UNKNOW with the error.

    The worker answers message after message with no hand-off per message; this thread only watches
    that it moves on. When it has been on one message for ``timeout_s``, that message is UNKNOW and a
    fresh worker goes on with the next (the hung one is left behind; what it may still answer is ignored).

    >>> ask_checker(lambda m: "ROLLBACK", [None], 1.0), ask_checker(lambda m: 1 / 0, [None], 1.0)[0][1]
    ([(<TransactionState.ROLLBACK_MESSAGE: 'ROLLBACK_MESSAGE'>, None)], 'ZeroDivisionError: division by zero')
    >>> import time
    >>> [s.name for s, _ in ask_checker(lambda m: time.sleep(m) or "COMMIT", [0, 5, 0], 0.2)]
    ['COMMIT_MESSAGE', 'UNKNOW', 'COMMIT_MESSAGE']
    """
    n = len(messages)
    if checker is None:
        return [(TransactionState.UNKNOW, "no checker is registered for the producer group")] * n
    answers: list[tuple[TransactionState, str | None] | None] = [None] * n
    start = 0
    while start < n:
        run = _CheckerRun(checker, messages, answers, start)
        seen = start
        while True:
            run.thread.join(timeout_s)
            if not run.thread.is_alive():
                start = n
                break
            at = run.position
            if at == seen:  # no answer for timeout_s: this message is stuck
                run.abandoned = True
                answers[at] = (TransactionState.UNKNOW, f"the checker did not answer within {timeout_s:g} s")
                start = at + 1
                break
            seen = at
    return [a if a is not None else (TransactionState.UNKNOW, "no answer") for a in answers]


class _CheckerRun:
    """A worker thread asking ``checker`` about ``messages[start:]``, writing into ``answers`` until abandoned."""

    def __init__(self, checker: Callable[[Any], Any], messages: Sequence[Any], answers: list, start: int):
        self.position = start
        self.abandoned = False
        self.thread = threading.Thread(target=self._work, args=(checker, messages, answers), daemon=True)
        self.thread.start()

    def _work(self, checker: Callable[[Any], Any], messages: Sequence[Any], answers: list) -> None:
        states: dict[Any, TransactionState] = {}
        for i in range(self.position, len(messages)):
            self.position = i
            try:
                value = checker(messages[i])
                state = states.get(value) if isinstance(value, (str, TransactionState)) else None
                if state is None:
                    state = TransactionState.of(value)
                    states[value] = state
                answer: tuple[TransactionState, str | None] = (state, None)
            except Exception as e:
                answer = (TransactionState.UNKNOW, f"{type(e).__name__}: {e}")
            if self.abandoned:
                return
            answers[i] = answer
        self.position = len(messages)


def check_transactions(
    ctx: StoreContext,
    now: object = None,
    *,
    fault: Callable[[str], None] | None = None,
    ask: Callable[[StoreContext, pa.Table], list[tuple[TransactionState, str | None]]] | None = None,
) -> CheckResult:
    """One check-back run over the pending half messages at ``now`` (epoch ms or an aware datetime;
    default the clock); see the module docstring. ``ask`` answers for the half messages due (default: each
    producer group's registered checker; the gRPC endpoint asks its connected producers, which answer
    later, so it says UNKNOW). ``fault`` (a test seam) is called with ``asked`` (every checker answered,
    nothing written) and ``committed``."""
    now = epoch_ms(now, "now", default=now_ms())
    config = ctx.config
    for _ in range(config.max_commit_attempts):
        rows, markers, end = pending_halves(ctx)
        result = CheckResult()
        props = rows.column("properties")
        born = pc.divide(pc.cast(rows.column("born_timestamp"), pa.int64()), 1000).to_numpy(zero_copy_only=False)
        immune = property_array(props, MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
        immunity = pc.multiply(
            pc.cast(
                pc.if_else(pc.match_substring_regex(pc.fill_null(immune, ""), r"^[0-9]{1,12}$"), immune, "0"),
                pa.int64(),
            ),
            1000,
        ).to_numpy(zero_copy_only=False)
        wait = np.maximum(immunity, config.transaction_timeout_ms)
        ripe = (now - born) >= wait
        times_text = property_array(props, MessageConst.TRANSACTION_CHECK_TIMES)
        times = pc.cast(
            pc.if_else(pc.fill_null(pc.match_substring_regex(times_text, r"^[0-9]{1,9}$"), False), times_text, "0"),
            pa.int64(),
        ).to_numpy(zero_copy_only=False)
        young = np.nonzero(~ripe)[0]
        new_mark = int(rows.column("physical_offset")[int(young[0])].as_py()) if len(young) else end
        checked = keep(rows, ripe)
        times = times[ripe]
        give_up = times >= config.transaction_check_max
        states: list[TransactionState] = [TransactionState.ROLLBACK_MESSAGE] * checked.num_rows
        asked_rows = keep(checked, ~give_up)
        if asked_rows.num_rows:
            answers = (ask or ask_registered)(ctx, asked_rows)
            for k, (state, error) in zip(np.nonzero(~give_up)[0].tolist(), answers):
                states[k] = state
                if error:
                    tid = checked.column("transaction_id")[k].as_py()
                    result.errors.append(f"{tid}: {error}")
        if fault:
            fault("asked")
        kinds = np.array([s.value for s in states], dtype=object)
        unknown = kinds == TransactionState.UNKNOW.value
        ended = keep(checked, ~unknown)
        parts = [ended_rows(ended, [s for s, u in zip(states, unknown) if not u], ctx.producer.born_host)]
        if unknown.any():
            back = checked.filter(pa.array(unknown))
            count = pc.cast(pc.add(pa.array(times[unknown]), 1), pa.string())
            parts.append(
                restaged(
                    back,
                    pa.repeat(pa.scalar(TRANS_HALF_TOPIC), back.num_rows),
                    pa.repeat(pa.scalar(0, pa.int32()), back.num_rows),
                    edit_properties(
                        back.column("properties").combine_chunks(), (), {MessageConst.TRANSACTION_CHECK_TIMES: count}
                    ),
                )
            )
        if give_up.any():
            dead = checked.filter(pa.array(give_up))
            parts.append(
                restaged(
                    dead,
                    pa.repeat(pa.scalar(TRANS_CHECK_MAX_TIME_TOPIC), dead.num_rows),
                    pa.repeat(pa.scalar(0, pa.int32()), dead.num_rows),
                    dead.column("properties").combine_chunks(),
                )
            )
        out = pa.concat_tables(parts)
        advance = {CHECK_MARKER: new_mark} if new_mark != markers[CHECK_MARKER] else {}
        if not out.num_rows and not advance:
            return result
        try:
            result.version = ctx.commitlog.append_arrow(
                out, Progress(markers, advance), operation="CHECK_TRANSACTIONS"
            ).version
        except ProgressMovedError:
            continue
        if fault:
            fault("committed")
        result.checked = checked.num_rows
        result.given_up = int(give_up.sum())
        result.unknown = int(unknown.sum())
        result.committed = int((kinds == TransactionState.COMMIT_MESSAGE.value).sum())
        result.rolled_back = result.checked - result.committed - result.unknown - result.given_up
        return result
    raise ProgressMovedError(None, "transaction ends kept moving first")


def ask_registered(ctx: StoreContext, rows: pa.Table) -> list[tuple[TransactionState, str | None]]:
    """Every row's answer from its producer group's registered checker, group by group.

    >>> ask_registered(store.context, pending_halves(store.context)[0])
    []
    """
    groups = property_array(rows.column("properties"), MessageConst.PGROUP).to_pylist()
    messages = message_views(rows.drop_columns(["transaction_id"]))  # attributes read from the batch on demand
    answers: list[tuple[TransactionState, str | None]] = [(TransactionState.UNKNOW, None)] * len(messages)
    timeout = ctx.config.transaction_checker_timeout_ms / 1000
    for group in sorted(set(g or "" for g in groups)):
        at = [i for i, g in enumerate(groups) if (g or "") == group]
        try:
            checker = checker_of(ctx, group) if group else None
        except TransactionError as e:
            got: list[tuple[TransactionState, str | None]] = [(TransactionState.UNKNOW, str(e))] * len(at)
        else:
            got = ask_checker(checker, [messages[i] for i in at], timeout)
        for i, answer in zip(at, got):
            answers[i] = answer
    return answers
