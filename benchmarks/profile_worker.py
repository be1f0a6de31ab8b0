"""Profile the aggregator's hot path without Kafka's consumer and faust: `BatchHandler.handle` on micro-batches of
pre-encoded messages (as the worker gets them from `stream.take_events`), with the real plans, Redis store and
dead-letter producer, under cProfile.

Prints JSON: the reports/s of the handler alone, the share of the handler's time in each of its steps (decode,
validation and accumulation, building the Redis script's arguments, the Redis script itself), and the top functions
by cumulative and own time. `--no-dedupe` turns the spec's one-report-per-window off, to show what the dedupe sets
cost; `--plain` times the handler without the profiler. Needs the services (`ldp up`); the collection is published
on a private specs topic (see bench_pipeline), and its Redis keys, report topic and specs topic are removed at the
end.
Run: .venv/bin/python benchmarks/profile_worker.py [--reports 1000000] [--batch 1000] [--single] [--max-messages 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import Fleet, encode_fleet, specs_topic  # noqa: E402

from ldpstream.aggregator.plans import PlanRegistry  # noqa: E402
from ldpstream.aggregator.store import RedisStore  # noqa: E402
from ldpstream.aggregator.worker import DEFAULT_MAX_MESSAGES, BatchHandler  # noqa: E402
from ldpstream.contract.spec import CollectionSpec, load_spec  # noqa: E402
from ldpstream.contract.topics import SPECS_TOPIC  # noqa: E402
from ldpstream.runtime.dlq import DeadLetterProducer  # noqa: E402
from ldpstream.runtime.kafka import delete_topic  # noqa: E402
from ldpstream.runtime.specs import publish_spec  # noqa: E402
from ldpstream.services import Settings  # noqa: E402

# the handler's steps, by the functions that do them (cumulative time of each, as a share of handle())
STEPS = {
    "decode and check each message (PartitionProcessor._decode)": ("processing.py", "_decode"),
    "  of which msgspec (ldpstream.contract.wire.decode_envelope)": ("wire.py", "decode_envelope"),
    "concatenate each spec version's messages (ldpstream.contract.wire.concatenate)": ("wire.py", "concatenate"),
    "validate+accumulate (PartitionProcessor._accumulate)": ("processing.py", "_accumulate"),
    "  of which window_increments": ("processing.py", "window_increments"),
    "store.apply (args + Lua)": ("store.py", "apply"),
    "  of which the Redis round trip (Script.__call__)": ("commands", "__call__"),
    "  of which stats_fields": ("store.py", "stats_fields"),
    "store.offsets (per round)": ("store.py", "offsets"),
}


@dataclass(frozen=True)
class Event:
    """What `BatchHandler.handle` reads of a faust event: its message."""

    message: Any


@dataclass(frozen=True)
class KafkaMessage:
    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp: int | None = None


def micro_batches(topic: str, fleets: list[Fleet], size: int) -> list[list[Event]]:
    """The fleets' messages on their partitions with increasing offsets there, in sending order, cut into
    micro-batches."""
    offsets: dict[int, int] = defaultdict(int)
    events = []
    for f in fleets:
        for partition, value in zip(f.partitions, f.values, strict=True):
            events.append(Event(KafkaMessage(topic, partition, offsets[partition], value)))
            offsets[partition] += 1
    return [events[i:i + size] for i in range(0, len(events), size)]


def handle_all(handler: BatchHandler, batches: list[list[Event]]) -> None:
    """The micro-batches through the handler, one after the other, as the worker's agent does."""
    async def run() -> None:
        for events in batches:
            await handler.handle(events)

    asyncio.run(run())


def timed_steps(handler: BatchHandler) -> dict[str, float]:
    """Wrap the handler's steps (a few calls per partition and micro-batch) with wall-clock accumulators: the
    profiler's own overhead inflates Python-heavy code, these do not."""
    seconds: dict[str, float] = defaultdict(float)

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[label] += time.perf_counter() - start
        return run

    processor, store = handler.processor, handler.store
    setattr(processor, "process", timed("decode+validate+accumulate (processor.process)", processor.process))  # noqa: B010
    setattr(store, "apply", timed("store.apply (script args + Redis)", store.apply))  # noqa: B010
    setattr(store, "offsets", timed("store.offsets (one read per partition and round)", store.offsets))  # noqa: B010
    return seconds


def step_shares(stats: pstats.Stats, total: float) -> dict[str, float]:
    out = {}
    for label, (file_part, name) in STEPS.items():
        cum = sum(v[3] for (path, _, func), v in stats.stats.items()  # type: ignore[attr-defined]
                  if func == name and file_part in path)
        out[label] = round(cum / total, 3)
    return out


def top(stats: pstats.Stats, key: str, n: int) -> str:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats(key).print_stats(n)
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=Path("examples/diagnostics.yaml"))
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--single", action="store_true")
    parser.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES)
    parser.add_argument("--no-dedupe", action="store_true", help="one_report_per_window off: no dedupe sets")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--plain", action="store_true", help="time the handler without the profiler")
    args = parser.parse_args()
    cfg = Settings.from_env()
    run = uuid.uuid4().hex[:8]
    spec = load_spec(args.spec).replace(name=f"bench-profile-{run}")
    if args.no_dedupe:
        spec = spec.replace(one_report_per_window=False)
    specs = f"{SPECS_TOPIC}.profile-{run}"  # private: no other session's worker follows this collection
    store = RedisStore(cfg.redis)
    try:
        with specs_topic(specs):
            publish_spec(spec, cfg.bootstrap)
            print(json.dumps(profile(spec, cfg, store, args), indent=1))
    finally:
        store.delete_collection(spec.name)
        for topic in (spec.topic, specs):
            delete_topic(cfg.bootstrap, topic)


def profile(spec: CollectionSpec, cfg: Settings, store: RedisStore, args: argparse.Namespace) -> dict[str, Any]:
    """Run the handler over the fleet's micro-batches under cProfile; the summary and the top functions."""
    warm = encode_fleet(spec, args.batch, 1, args.batch, args.single)
    fleet = encode_fleet(spec, args.reports, 2, args.batch, args.single)
    batches = micro_batches(spec.topic, [warm, fleet], args.max_messages)
    handler = BatchHandler(store, PlanRegistry(cfg.bootstrap), DeadLetterProducer(cfg.bootstrap))
    handle_all(handler, [batches[0][:len(warm.values)]])  # plans loaded, script registered
    batches[0] = batches[0][len(warm.values):]
    timers = timed_steps(handler) if args.plain else {}
    profiler = cProfile.Profile()
    start = time.perf_counter()
    if not args.plain:
        profiler.enable()
    handle_all(handler, batches)
    profiler.disable()
    seconds = time.perf_counter() - start
    if args.plain:
        return {"reports": fleet.total, "messages": len(fleet.values), "dedupe": spec.one_report_per_window,
                "seconds": round(seconds, 2), "reports_per_s": round(fleet.total / seconds),
                "step_share_of_handle": {k: round(v / seconds, 3) for k, v in timers.items()}}
    stats = pstats.Stats(profiler)
    handle_s = sum(v[3] for (path, _, func), v in stats.stats.items()  # type: ignore[attr-defined]
                   if func == "handle" and path.endswith("worker.py"))
    return {"reports": fleet.total, "messages": len(fleet.values), "micro_batches": len(batches),
            "dedupe": spec.one_report_per_window, "accepted": store.outcomes(spec.name).get("accepted", 0) - warm.total,
            "seconds_profiled": round(seconds, 2), "reports_per_s_under_profiler": round(fleet.total / seconds),
            "step_share_of_handle": step_shares(stats, handle_s),
            "top_cumulative": top(stats, "cumulative", args.top).splitlines(),
            "top_own_time": top(stats, "tottime", args.top).splitlines()}

if __name__ == "__main__":
    main()
