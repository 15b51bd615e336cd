"""The online path: many producers sending at once, a follower dispatching, consumers long-polling.

``P`` producer processes of ``T`` threads each send 100-byte messages through the store's group-commit
producer for ``seconds``; a follower (``storelib dispatch --follow``) dispatches as they arrive;
``C`` consumer processes long-poll the topic's queues (a thread per queue) and time each message from
its send call to the pull that returned it (a ``sent_ns`` property). Reported: send throughput, the
send ack p50/p99, end to end p50/p99, and whether commits stay as fast (the last 1,000 commits
against the first 1,000), each
against ``send_batch`` of the same messages in batches of 1,000 in the same run (the throughput ceiling);
how long the producers' commits held the table's commit turn (the writers of one machine take turns;
counted by the process that committed, the machine's committer for the others, :mod:`storelib.local.relay`),
and the sends in flight, whose ratio to the throughput is the mean ack (Little's law); and the CPU
each role spent per message sent (every thread of the process, delta-rs's own included), against the
CPU the machine had over the run.
The run's clock starts once every process has imported its modules and opened the store, and the
follower is following: all producers start sending at the same moment, and the throughput and CPU
figures count from then to the last producer's last ack (a process's start is not a send's cost).
No Spark: every process works with pyarrow and deltalake.

>>> figures = OnlineFigures(1000, 10.0, 5000.0, [0.01] * 10, [0.02] * 10, 0.01, 0.011,
...                         cpu={"producers": [0.1, 0.1]}, cores=2,
...                         turn_held=9.0, in_flight=2, nice={"consumers": [10], "follower": [0]})
>>> figures.lines()[0].split()[:4]
['send', '100', 'msg/s', 'from']
>>> print(figures.lines()[-1])  # doctest: +NORMALIZE_WHITESPACE
CPU per message sent: producers 200 us (0.2 s); 1% of the 20 s 2 cores had while the producers sent
(consumers at nice 10)
>>> print(figures.lines()[-2])  # doctest: +NORMALIZE_WHITESPACE
commit turn held 90% of the run by the producers' commits; 2 sends in flight: a mean ack of 20 ms at this
throughput (Little's law), 10 ms measured
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.benchmarks import latency_figures, percentile

__all__ = ["OnlineFigures", "bench_online"]

TOPIC, GROUP, QUEUES = "Online", "GroupOnline", 16
ROOT = Path(__file__).resolve().parents[2]

PRODUCER = textwrap.dedent("""
    import collections, json, os, sys, threading, time
    from storelib import Message, MessageStore
    from storelib.local.relay import relay_for
    root, seconds, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    window, out = int(sys.argv[4]), sys.argv[5]
    store = MessageStore.open(root, relay_sends=sys.argv[6] == "relay")
    store.context.sends  # the producer made before the clock starts
    ready(out)
    cpu = time.process_time()
    acks = []
    end = time.monotonic() + seconds
    def work():
        mine, flying = [], collections.deque()
        def settle():
            future, t = flying.popleft()
            future.result()
            mine.append((time.monotonic(), time.perf_counter() - t))
        while time.monotonic() < end:
            if len(flying) >= window:
                settle()
            t = time.perf_counter()
            message = Message("Online", body=b"x" * 100, properties={"sent_ns": str(time.time_ns())})
            flying.append((store.send_async(message), t))
        while flying:
            settle()
        acks.extend(mine)
    running = [threading.Thread(target=work) for _ in range(threads)]
    [t.start() for t in running]; [t.join() for t in running]
    done = time.time()
    store.close()
    commits = relay_for(store.context.commitlog)  # this process's commits, as the machine's committer or by itself
    json.dump({"acks": acks, "commits": commits.commits, "commit_seconds": list(commits.commit_seconds),
               "cpu": time.process_time() - cpu, "done": done}, open(out, "w"))
""")

CONSUMER = textwrap.dedent("""
    import json, os, sys, threading, time
    from storelib import MessageStore
    from storelib.local.tail import tail_client
    root, seconds, queues, out = sys.argv[1], float(sys.argv[2]), [int(q) for q in sys.argv[3].split(",")], sys.argv[4]
    store = MessageStore.open(root, tail_pulls=sys.argv[5] == "tail")
    until = ready(out) + seconds + 5
    latencies, stored = [], []
    def work(q):  # a long poll per queue, as RocketMQ's PullMessageService holds one per queue
        offset, mine, since_stored = 0, [], []
        while time.time() < until:
            r = store.pull("GroupOnline", "Online", q, offset, 32, suspend_timeout_ms=200)
            now = time.time_ns()
            mine.extend((now - int(m.properties["sent_ns"])) / 1e9 for m in r.messages)
            since_stored.extend(now / 1e9 - m.store_timestamp.timestamp() for m in r.messages)
            offset = r.next_begin_offset
        latencies.extend(mine)
        stored.extend(since_stored)
    running = [threading.Thread(target=work, args=(q,)) for q in queues]
    [t.start() for t in running]; [t.join() for t in running]
    tail = tail_client(store.context)
    json.dump({"latencies": latencies, "stored": stored, "tail": tail.answered if tail else 0}, open(out, "w"))
""")

#: Both roles' scripts start with this: say "ready" (a file beside the figures), then wait for the
#: start the run gives every process at once (a file holding its wall-clock time), and return it.
READY = textwrap.dedent("""
    def ready(out):
        import os, time
        open(out + ".ready", "w").close()
        go = os.path.join(os.path.dirname(out), "go")
        while not os.path.exists(go + ".set"):
            time.sleep(0.005)
        at = float(open(go).read())
        time.sleep(max(0.0, at - time.time()))
        return at
""")


@dataclass(frozen=True)
class OnlineFigures:
    """Messages sent, seconds, the send_batch ceiling (msg/s), ack and end-to-end seconds, first/last ack p50."""

    sent: int
    seconds: float
    ceiling: float
    acks: list[float]
    end_to_end: list[float]
    first_p50: float
    last_p50: float
    commits: int = 0
    #: CPU seconds of each process, by role (producers, consumers, follower).
    cpu: dict[str, list[float]] = field(default_factory=dict)
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    #: Seconds the producers' commits held the table's commit turn, summed, and the sends in flight at once.
    turn_held: float = 0.0
    in_flight: int = 0
    #: The niceness each consumer and follower process ran at, by role (``--consumer-nice``, ``--follower-nice``).
    nice: dict[str, list[int]] = field(default_factory=dict)
    #: Pulls the follower answered from its tail (``tail_pulls``).
    tail_answered: int = 0
    #: Seconds from each message's store timestamp (set in its commit turn) to the pull that returned it:
    #: the part of the end to end that the commit, the follower's rounds and the pulls take.
    stored: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        rate = self.sent / self.seconds
        return (
            [
                f"send {rate:,.0f} msg/s from all producers ({self.sent:,} in {self.seconds:.0f} s); "
                f"send_batch of 1,000s: {self.ceiling:,.0f} msg/s ({rate / self.ceiling:.2f}x the ceiling)",
                f"send ack p50 {percentile(self.acks, 0.5) * 1000:.0f} ms, "
                f"p99 {percentile(self.acks, 0.99) * 1000:.0f} ms; "
                f"end to end p50 {percentile(self.end_to_end, 0.5) * 1000:.0f} ms, "
                f"p99 {percentile(self.end_to_end, 0.99) * 1000:.0f} ms "
                f"over {len(self.end_to_end):,} messages pulled"
                + (
                    f"; store timestamp to pull p50 {percentile(self.stored, 0.5) * 1000:.0f} ms, "
                    f"p99 {percentile(self.stored, 0.99) * 1000:.0f} ms"
                    if self.stored
                    else ""
                ),
                f"flat: commit p50 of the last 1,000 of {self.commits:,} commits {self.last_p50 * 1000:.1f} ms against "
                f"the first 1,000's {self.first_p50 * 1000:.1f} ms ({self.last_p50 / self.first_p50:.2f}x)",
            ]
            + self._turn_lines()
            + self._cpu_lines()
        )

    def _turn_lines(self) -> list[str]:
        """Why the ack is what it is: writers of one machine take turns to commit, and the sends in flight
        over the throughput is the mean ack (Little's law)."""
        if not self.in_flight:
            return []
        rate = self.sent / self.seconds
        mean = sum(self.acks) / len(self.acks) if self.acks else float("nan")
        return [
            f"commit turn held {self.turn_held / self.seconds:.0%} of the run by the producers' commits; "
            f"{self.in_flight:,} sends in flight: "
            f"a mean ack of {self.in_flight / rate * 1000:.0f} ms at this throughput "
            f"(Little's law), {mean * 1000:.0f} ms measured"
        ]

    def _cpu_lines(self) -> list[str]:
        if not self.cpu:
            return []
        had = self.cores * self.seconds
        spent = sum(sum(v) for v in self.cpu.values())
        roles = "; ".join(f"{role} {sum(v) / self.sent * 1e6:,.0f} us ({sum(v):.1f} s)" for role, v in self.cpu.items())
        lower = ", ".join(f"{role} at nice {max(v)}" for role, v in self.nice.items() if any(v))
        return [
            f"CPU per message sent: {roles}; "
            f"{spent / had:.0%} of the {had:.0f} s {self.cores} cores had while the producers sent"
            + (f" ({lower})" if lower else "")
            + (f"; {self.tail_answered:,} pulls answered by the follower's tail" if self.tail_answered else "")
        ]

    def as_dict(self) -> dict:
        return {
            "sent": self.sent,
            "msgs_per_s": round(self.sent / self.seconds),
            "ceiling_msgs_per_s": round(self.ceiling),
            **latency_figures(self.acks, self.end_to_end),
            "pulled": len(self.end_to_end),
            **(
                {
                    "stored_p50_ms": round(percentile(self.stored, 0.5) * 1000, 1),
                    "stored_p99_ms": round(percentile(self.stored, 0.99) * 1000, 1),
                }
                if self.stored
                else {}
            ),
            "flat_ratio": round(self.last_p50 / self.first_p50, 2),
            "commits": self.commits,
            "turn_held_share": round(self.turn_held / self.seconds, 2),
            "in_flight": self.in_flight,
            **{f"cpu_us_per_msg_{role}": round(sum(v) / self.sent * 1e6) for role, v in self.cpu.items()},
            **{f"nice_{role}": max(v) for role, v in self.nice.items() if v},
            "tail_answered": self.tail_answered,
        }


def bench_online(
    seconds: float = 60,
    *,
    producers: int = 4,
    threads: int = 16,
    window: int = 16,
    consumers: int = 4,
    root: str | None = None,
    relay: bool = False,
    consumer_nice: int = 0,
    follower_nice: int = 0,
    tail_pulls: bool = True,
    round_ms: int | None = None,
    store_uri: str | None = None,
    storage_env: dict[str, str] | None = None,
    harness: dict[str, list[int]] | None = None,
) -> OnlineFigures:
    """Run the online benchmark for ``seconds`` (see the module docstring); ``relay``: the producer
    processes hand their groups to the machine's committer (``relay_sends``); ``consumer_nice`` and
    ``follower_nice``: the consumer processes and the follower run at that niceness (the ``nice`` command), so
    that on a saturated machine the producers' commits get the CPU first; ``tail_pulls``: the follower serves
    the consumers' pulls of the queues' tails (``--serve-pulls``, :mod:`storelib.local.tail`); ``round_ms``:
    the follower's ``--round-ms`` (None: its default); ``store_uri``: the store's root (an ``s3://`` URI, reached
    with the ``AWS_*`` variables of ``storage_env`` in every process), else a folder of the run's; ``harness``:
    process ids of the run's other parts by role (an S3 server and its proxy), whose CPU is measured beside."""
    from storelib import Message, MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    env = {**os.environ, **(storage_env or {}), "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs: list[subprocess.Popen] = []
    try:
        store = MessageStore.create(store_uri or f"{work}/online", storage_options=storage_env)
        store.create_topic(TOPIC, queues=QUEUES)
        store.subscribe(GROUP, TOPIC, "*")
        with (
            open(f"{work}/follower.out", "w") as out,
            open(f"{work}/follower.err", "w") as err,
        ):  # the child keeps its own
            follower = subprocess.Popen(
                _lowered(
                    follower_nice,
                    [
                        sys.executable,
                        "-m",
                        "storelib",
                        "dispatch",
                        "--follow",
                        "--interval-ms",
                        "10",
                        "--store",
                        store.root,
                    ]
                    + (["--serve-pulls"] if tail_pulls else ["--no-serve-pulls"])
                    + ([f"--round-ms={round_ms}"] if round_ms is not None else []),
                ),
                env=env,
                stdout=out,
                stderr=err,
            )
        procs.append(follower)
        outs = [f"{work}/consumer{c}.json" for c in range(consumers)]
        pulling = [
            _started(
                _lowered(
                    consumer_nice,
                    [
                        sys.executable,
                        "-c",
                        READY + CONSUMER,
                        store.root,
                        str(seconds),
                        ",".join(str(q) for q in range(QUEUES) if q % consumers == c),
                        out,
                        "tail" if tail_pulls else "tables",
                    ],
                ),
                env,
                out,
            )
            for c, out in enumerate(outs)
        ]
        procs.extend(pulling)
        sends = [f"{work}/producer{p}.json" for p in range(producers)]
        senders = [
            _started(
                [
                    sys.executable,
                    "-c",
                    READY + PRODUCER,
                    store.root,
                    str(seconds),
                    str(threads),
                    str(window),
                    out,
                    "relay" if relay else "own",
                ],
                env,
                out,
            )
            for out in sends
        ]
        procs.extend(senders)
        _all_ready(dict(zip(outs + sends, pulling + senders)), follower, f"{work}/follower.err")
        began = _go(work)
        others = {"consumers": [p.pid for p in pulling], "follower": [follower.pid]}
        others.update({role: pids for role, pids in (harness or {}).items() if pids})
        cpu_before = {role: [_cpu_seconds(pid) for pid in pids] for role, pids in others.items()}
        nice = {
            role: [os.getpriority(os.PRIO_PROCESS, pid) for pid in others[role]] for role in ("consumers", "follower")
        }
        for s, out in zip(senders, sends):
            _finished(s, seconds + 300, out)
        cpu_after = {role: [_cpu_seconds(pid) for pid in pids] for role, pids in others.items()}
        elapsed = max(json.load(open(out))["done"] for out in sends) - began
        for p, out in zip(pulling, outs):
            _finished(p, seconds + 300, out)
        follower.send_signal(15)
        follower.wait(timeout=120)
        acks = [a for out in sends for a in json.load(open(out))["acks"]]
        acks.sort()
        latencies = [x for out in outs for x in json.load(open(out))["latencies"]]
        n = len(acks)
        commits = sorted(
            c for out in sends for c in json.load(open(out))["commit_seconds"]
        )  # every producer's, in time order
        edge = max(1, min(1000, len(commits) // 2))
        first = [c for _, c in commits[:edge]]
        last = [c for _, c in commits[-edge:]]
        # the ceiling: the same number of messages through send_batch, 1,000 at a time, on a store of its own
        ceiling_store = MessageStore.create(f"{work}/ceiling")
        ceiling_store.create_topic(TOPIC, queues=QUEUES)
        batch = [Message(TOPIC, body=b"x" * 100, properties={"sent_ns": "0"}) for _ in range(1000)]
        t = time.perf_counter()
        for _ in range(max(1, n // 1000)):
            ceiling_store.send_batch(batch)
        ceiling = max(1, n // 1000) * 1000 / (time.perf_counter() - t)
        cpu = {"producers": [json.load(open(out))["cpu"] for out in sends]}
        for role in others:
            if None not in cpu_before[role] + cpu_after[role]:
                cpu[role] = [after - before for before, after in zip(cpu_before[role], cpu_after[role])]
        return OnlineFigures(
            n,
            elapsed,
            ceiling,
            [a for _, a in acks],
            latencies,
            percentile(first, 0.5),
            percentile(last, 0.5),
            len(commits),
            cpu,
            turn_held=sum(c for _, c in commits),
            in_flight=producers * threads * window,
            nice=nice,
            tail_answered=sum(json.load(open(out))["tail"] for out in outs),
            stored=[x for out in outs for x in json.load(open(out))["stored"]],
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


def _all_ready(
    started: dict[str, subprocess.Popen], follower: subprocess.Popen, follower_err: str, timeout: float = 300
) -> None:
    """Wait until every producer and consumer (by where it writes its figures) has opened the store (its
    ``<out>.ready`` file) and the follower is following; one that exits first fails the run."""
    deadline = time.monotonic() + timeout
    while not (
        all(os.path.exists(f"{out}.ready") for out in started) and "following" in Path(follower_err).read_text()
    ):
        for out, p in started.items():
            if p.poll() is not None:
                _finished(p, 0, out)
                raise RuntimeError(f"{os.path.basename(out)[:-5]} exited before the run began")
        if follower.poll() is not None:
            raise RuntimeError(
                f"the follower exited with {follower.returncode}: {Path(follower_err).read_text()[-800:]}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"the benchmark's processes were not ready after {timeout:.0f} s")
        time.sleep(0.02)


def _go(work: str) -> float:
    """Give every process the run's start (a wall-clock time a moment ahead), all at once; return it."""
    at = time.time() + 0.2
    Path(f"{work}/go").write_text(repr(at))
    Path(f"{work}/go.set").touch()  # written after the time, so no process reads a half-written one
    return at


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user and system, every thread) a running process has spent, from ``/proc``; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lowered(niceness: int, argv: list[str]) -> list[str]:
    """``argv`` run at ``niceness`` through the ``nice`` command, which execs it (same pid); as it is for 0."""
    return ["nice", "-n", str(niceness), *argv] if niceness else argv


def _started(argv: list[str], env: dict[str, str], out: str) -> subprocess.Popen:
    """A producer or consumer process writing its figures to ``out`` and its errors to ``<out>.err``."""
    with open(f"{out}.err", "w") as err:  # the child keeps its own handle
        return subprocess.Popen(argv, env=env, stderr=err)


def _finished(proc: subprocess.Popen, timeout: float, out: str) -> None:
    """Wait for a producer or consumer process; one that failed fails the run with the end of what it
    wrote to ``<out>.err``, instead of leaving its figures out."""
    if proc.wait(timeout=timeout):
        with open(f"{out}.err") as err:
            raise RuntimeError(
                f"{os.path.basename(out)[:-5]} exited with {proc.returncode}: {err.read().strip()[-800:]}"
            )
