"""RocketMQ's own clients through ``storelib serve``: producers sending asynchronously with the official Python
client, a SimpleConsumer group receiving and acking, beside the in-process online suite in the same run.

``P`` producer processes keep ``window`` asynchronous sends each in flight (``Producer.send_async``) for
``seconds`` (at most ``rate`` a second, when given); ``C`` consumer processes of one group loop
``receive(32)`` and ack what they got (``ack_async``), timing each message from its send (a ``sent_ns``
property) to the receive that returned it. The endpoint is one ``storelib serve`` process (its follower
dispatching in it). Reported: throughput acked by the endpoint, send ack p50/p99, end to end p50/p99,
messages received and acked, and the CPU each role spent per message; then the online suite's figures
at the same processes for the baseline.

>>> f = GrpcFigures(3000, 10.0, [0.01] * 9, [0.2] * 9, 3000, 0, {"endpoint": [5.0]}, 2)
>>> f.lines()[0]
'grpc: 300 msg/s acked by the endpoint (3,000 in 10 s); 3,000 received and acked, 0 send errors'
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

from jobs.benchmarks import latency_figures, percentile
from jobs.benchmarks.online import READY, ROOT, _cpu_seconds, _finished, _go, _started

__all__ = ["GrpcFigures", "bench_grpc"]

TOPIC, GROUP, QUEUES = "Grpc", "GroupGrpc", 8

PRODUCER = textwrap.dedent("""
    import json, sys, threading, time
    from rocketmq import ClientConfiguration, Credentials, Message, Producer
    address, seconds, window, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rate = float(sys.argv[5])
    producer = Producer(ClientConfiguration(address, Credentials("ak", "sk")), ("Grpc",))
    producer.startup()
    ready(out)
    acks, errors, slots, lock = [], [0], threading.Semaphore(window), threading.Lock()
    cpu = time.process_time()
    end = time.monotonic() + seconds
    def done(future, t):
        took = time.perf_counter() - t
        with lock:
            if future.exception() is None:
                acks.append(took)
            else:
                errors[0] += 1
        slots.release()
    began, sent = time.monotonic(), 0
    while time.monotonic() < end:
        if rate:  # paced: the n-th send leaves no sooner than n / rate seconds in
            time.sleep(max(0.0, began + sent / rate - time.monotonic()))
        sent += 1
        slots.acquire()
        m = Message(); m.topic = "Grpc"; m.body = b"x" * 100; m.add_property("sent_ns", str(time.time_ns()))
        t = time.perf_counter()
        producer.send_async(m).add_done_callback(lambda f, t=t: done(f, t))
    for _ in range(window):
        slots.acquire()
    finished = time.time()
    producer.shutdown()
    json.dump({"acks": acks, "errors": errors[0], "cpu": time.process_time() - cpu, "done": finished}, open(out, "w"))
""")

CONSUMER = textwrap.dedent("""
    import json, sys, time
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    address, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    consumer = SimpleConsumer(ClientConfiguration(address, Credentials("ak", "sk")), "GroupGrpc",
                              {"Grpc": FilterExpression("*")}, await_duration=5)
    consumer.startup()
    until = ready(out) + seconds + 5
    cpu = time.process_time()
    latencies = []
    while time.time() < until:
        got = consumer.receive(32, 30)
        now = time.time_ns()
        latencies.extend((now - int(m.properties["sent_ns"])) / 1e9 for m in got)
        for m in got:  # acks in flight at once (the client's ack_async works on the main thread only)
            consumer.ack_async(m)
    cpu = time.process_time() - cpu
    consumer.shutdown()
    json.dump({"latencies": latencies, "cpu": cpu}, open(out, "w"))
""")


@dataclass(frozen=True)
class GrpcFigures:
    """Messages acked by the endpoint, seconds, ack and end-to-end seconds, received, send errors, CPU by role."""

    sent: int
    seconds: float
    acks: list[float]
    end_to_end: list[float]
    received: int
    errors: int
    cpu: dict[str, list[float]] = field(default_factory=dict)
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    baseline: object | None = None  # the online suite's figures, same run

    def lines(self) -> list[str]:
        rate = self.sent / self.seconds
        out = [
            f"grpc: {rate:,.0f} msg/s acked by the endpoint ({self.sent:,} in {self.seconds:.0f} s); "
            f"{self.received:,} received and acked, {self.errors:,} send errors"
        ]
        if self.acks:
            out.append(
                f"grpc: send ack p50 {percentile(self.acks, 0.5) * 1000:.0f} ms, p99 "
                f"{percentile(self.acks, 0.99) * 1000:.0f} ms; end to end p50 "
                f"{percentile(self.end_to_end, 0.5) * 1000:.0f} ms, "
                f"p99 {percentile(self.end_to_end, 0.99) * 1000:.0f} ms"
            )
        if self.cpu:
            roles = "; ".join(f"{r} {sum(v) / max(1, self.sent) * 1e6:,.0f} us" for r, v in self.cpu.items())
            spent = sum(sum(v) for v in self.cpu.values())
            out.append(
                f"grpc: CPU per message: {roles}; {spent / (self.cores * self.seconds):.0%} of the machine's "
                f"{self.cores} cores over the run"
            )
        if self.baseline is not None:
            base = self.baseline.as_dict()  # type: ignore[attr-defined]
            out.append(
                f"in-process online suite, same run: {base['msgs_per_s']:,} msg/s, ack p50 {base['ack_p50_ms']} ms, "
                f"end to end p50 {base['e2e_p50_ms']} ms, p99 {base['e2e_p99_ms']} ms; the endpoint's throughput "
                f"is {rate / max(1, base['msgs_per_s']):.2f}x"
            )
        return out

    def as_dict(self) -> dict:
        return {
            "sent": self.sent,
            "msgs_per_s": round(self.sent / self.seconds),
            **latency_figures(self.acks, self.end_to_end),
            "received": self.received,
            "errors": self.errors,
            **{f"cpu_us_per_msg_{r}": round(sum(v) / max(1, self.sent) * 1e6) for r, v in self.cpu.items()},
            **({"baseline": self.baseline.as_dict()} if self.baseline is not None else {}),  # type: ignore[attr-defined]
        }


def bench_grpc(
    seconds: float = 30,
    *,
    producers: int = 2,
    window: int = 64,
    consumers: int = 2,
    root: str | None = None,
    baseline: bool = True,
    serve_prefix: tuple[str, ...] = (),
    follower_process: bool = False,
    rate: int = 0,
    floor: bool = False,
) -> GrpcFigures:
    """Run the gRPC suite for ``seconds`` (see the module docstring), then, with ``baseline``, the in-process
    online suite with as many producer and consumer processes. ``rate``: the producers together send at most
    this many messages a second (0: as fast as acks come back), to time end to end at a load the consumers
    keep up with; ``serve_prefix`` runs the endpoint under another command (a profiler); ``follower_process``:
    the endpoint leaves dispatch to a ``storelib dispatch --follow`` process of its own; ``floor``: the clients
    talk to :mod:`jobs.benchmarks.grpc_floor` (nothing stored) instead, to measure what they alone can do."""
    from storelib import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-grpc-")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs: list[subprocess.Popen] = []
    try:
        store = MessageStore.create(f"{work}/grpc")
        store.create_topic(TOPIC, queues=QUEUES)
        store.close()
        follower_process = follower_process and not floor
        serve = (
            ["jobs.benchmarks.grpc_floor"] if floor else ["storelib", "serve", "--store", f"{work}/grpc", "--port", "0"]
        )
        with open(f"{work}/serve.err", "w") as err:
            server = subprocess.Popen(
                [*serve_prefix, sys.executable, "-m", *serve] + (["--no-follow"] if follower_process else []),
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        procs.append(server)
        if follower_process:
            with open(f"{work}/follower.err", "w") as err:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "storelib", "dispatch", "--follow", "--store", f"{work}/grpc"],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )
        line = ""
        while server.stdout is not None and "serving" not in line and server.poll() is None:
            line = server.stdout.readline()  # a profiler may say something first
        if "serving" not in line:
            raise RuntimeError(f"storelib serve did not start: {open(f'{work}/serve.err').read()[-800:]}")
        address = line.split(" on ")[1].split()[0]
        outs = [f"{work}/consumer{c}.json" for c in range(consumers)]
        sends = [f"{work}/producer{p}.json" for p in range(producers)]
        pulling = [
            _started([sys.executable, "-c", READY + CONSUMER, address, str(seconds), out], env, out) for out in outs
        ]
        senders = [
            _started(
                [
                    sys.executable,
                    "-c",
                    READY + PRODUCER,
                    address,
                    str(seconds),
                    str(window),
                    out,
                    str(rate / producers),
                ],
                env,
                out,
            )
            for out in sends
        ]
        procs.extend(pulling + senders)
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{o}.ready") for o in outs + sends):
            for p, o in zip(pulling + senders, outs + sends):
                if p.poll() is not None:
                    _finished(p, 0, o)
            if time.monotonic() > deadline:
                raise RuntimeError("the clients were not ready after 120 s")
            time.sleep(0.05)
        began = _go(work)
        before = _cpu_seconds(server.pid)
        for s, out in zip(senders, sends):
            _finished(s, seconds + 300, out)
        after = _cpu_seconds(server.pid)
        elapsed = max(json.load(open(out))["done"] for out in sends) - began
        for p, out in zip(pulling, outs):
            _finished(p, seconds + 300, out)
        server.terminate()
        server.wait(timeout=60)
        produced = [json.load(open(out)) for out in sends]
        consumed = [json.load(open(out)) for out in outs]
        cpu = {"producers": [p["cpu"] for p in produced], "consumers": [c["cpu"] for c in consumed]}
        if before is not None and after is not None:
            cpu["endpoint"] = [after - before]
        base = None
        if baseline:
            from jobs.benchmarks.online import bench_online

            base = bench_online(
                seconds, producers=producers, threads=max(1, window // 16), window=16, consumers=consumers
            )
        return GrpcFigures(
            sum(len(p["acks"]) for p in produced),
            elapsed,
            [a for p in produced for a in p["acks"]],
            [x for c in consumed for x in c["latencies"]],
            sum(len(c["latencies"]) for c in consumed),
            sum(p["errors"] for p in produced),
            cpu,
            baseline=base,
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
