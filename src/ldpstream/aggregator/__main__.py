"""One aggregator worker process in the foreground: `python -m ldpstream.aggregator [--group G] [--metrics-port P]`.

`--max-clock-skew-s S` (default: env `LDP_MAX_CLOCK_SKEW_S`, else 300): how far ahead of this worker's clock a
report's time may be; a report further ahead is dead-lettered `future_timestamp`. Raise it only where devices'
clocks are known to run ahead, or to replay a simulated day in minutes (tests/integration/test_longitudinal_pipeline.py
stamps 24 hourly windows ahead of now); the dedupe lists are kept in the store that much longer.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

import redis

from ldpstream.aggregator.health import WorkerRegistry, worker_id
from ldpstream.aggregator.worker import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_MESSAGES, RESTART, WorkerConfig, build_app
from ldpstream.contract.validation import MAX_CLOCK_SKEW_SETTING_S, clock_skew_ms
from ldpstream.runtime import metrics
from ldpstream.runtime.access import AGGREGATOR_GROUPS, act_as, kafka_security
from ldpstream.runtime.catalog import service
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.supervisor import die_with_parent, unusable


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--group", default="ldp-aggregator")
    parser.add_argument("--metrics-port", type=int, default=None)
    parser.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES)
    parser.add_argument("--max-batch-bytes", type=int, default=DEFAULT_MAX_BATCH_BYTES,
                        help="message bytes per store write (about 26 per report of a batched envelope)")
    parser.add_argument("--max-clock-skew-s", default=os.environ.get("LDP_MAX_CLOCK_SKEW_S", "300"),
                        help=f"how far ahead report times may be (0..{MAX_CLOCK_SKEW_SETTING_S} s)")
    parser.add_argument("--loglevel", default="warn", choices=["crit", "error", "warn", "info", "debug"])
    args = parser.parse_args(argv)
    die_with_parent()
    try:
        max_skew_ms = clock_skew_ms(args.max_clock_skew_s)
    except ValueError as exc:
        parser.error(f"--max-clock-skew-s / LDP_MAX_CLOCK_SKEW_S: {exc}")
    act_as(service("aggregator").principal.name)
    cfg = Settings.from_env()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.metrics_port is not None:  # bound before the app starts: a port taken is one line, not a crash loop
        try:
            metrics.serve(args.metrics_port, cfg, service("aggregator"))
        except OSError as exc:
            unusable("ldpstream.aggregator", f"cannot serve metrics on {cfg.metrics_addr}:{args.metrics_port}: "
                                             f"{exc.strerror}")
    try:
        if kafka_security(cfg) and cfg.kafka_config is None and not args.group.startswith(AGGREGATOR_GROUPS):
            parser.error(f"--group {args.group}: the aggregator principal may join only consumer groups named "
                         f"{AGGREGATOR_GROUPS}* (its ACLs, ldpstream.runtime.access)")
        app = build_app(WorkerConfig(cfg.bootstrap, cfg.redis, group=args.group, max_messages=args.max_messages,
                                     max_batch_bytes=args.max_batch_bytes, max_skew_ms=max_skew_ms))
    except FileNotFoundError as exc:  # no credentials yet (`ldp up` makes them): one line
        unusable("ldpstream.aggregator", str(exc))
    argv = list(sys.argv)
    # faust allocates several objects per message: collect the young generation 70x less often than Python's
    # default (700), and keep the start-up objects out of every collection (about 10% more one-report messages/s).
    gc.freeze()
    gc.set_threshold(50_000, 50, 50)
    no_transparent_huge_pages()
    sys.argv = [sys.argv[0], "worker", "--loglevel", args.loglevel, "--without-web"]
    try:
        app.main()
    finally:
        leave(cfg.redis)
        if RESTART.is_set():  # stopped cleanly to subscribe to a newly published collection: start afresh
            os.execv(sys.executable, [sys.executable, "-m", "ldpstream.aggregator", *argv[1:]])


def no_transparent_huge_pages() -> None:
    """Stop numpy asking for transparent huge pages for its large arrays (the dedupe tables): where the kernel
    compacts memory on such a fault (THP defrag "madvise", Debian's default), first touches of a fresh table cost
    tens of milliseconds at unpredictable moments (measured: zeroing 32 MB took 84 ms with huge pages asked for,
    23 ms without); plain 4 KB faults cost the same every time, and `ldpstream.aggregator.dedupe` spreads them."""
    try:
        # numpy 2; private, so numpy's stubs leave it out
        from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]
    except ImportError:  # numpy 1.26
        from numpy.core.multiarray import _set_madvise_hugepage  # type: ignore[no-redef]
    _set_madvise_hugepage(False)


def leave(redis_url: str) -> None:
    """Remove this worker's heartbeat on a clean stop (a worker that dies without it shows as down)."""
    try:
        WorkerRegistry(redis_client(redis_url, 5.0)).leave(worker_id())
    except redis.RedisError as exc:
        logging.getLogger(__name__).warning("heartbeat not removed: %s", exc)


if __name__ == "__main__":
    main()
