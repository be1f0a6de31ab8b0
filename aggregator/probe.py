"""A faust agent that counts the messages of a topic into a Redis key and does nothing else.

It is the smallest end-to-end proof of the path Kafka -> faust -> Redis (`ldp demo --probe`, the integration
test of the foundation) and the do-nothing baseline of the pipeline benchmark. Run as
`python -m aggregator.probe --topic T --redis-key K [--group G]`.
"""

from __future__ import annotations

import argparse
import logging
import sys

import faust
import redis

from ldpstream.services import ServicesConfig


def build_app(topic: str, redis_key: str, group: str, cfg: ServicesConfig, batch: int = 2000) -> faust.App:
    """A faust app whose one agent adds the size of every micro-batch of `topic` to `redis_key`."""
    (cfg.state_dir / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(group, broker=f"kafka://{cfg.bootstrap}", store="memory://", web_enabled=False,
                    datadir=str(cfg.state_dir / "faust" / group),
                    topic_partitions=8, consumer_auto_offset_reset="earliest", producer_acks=-1)
    source = app.topic(topic, value_type=bytes, value_serializer="raw", key_serializer="raw")
    store = redis.Redis.from_url(cfg.redis)

    @app.agent(source)
    async def count(stream: faust.StreamT) -> None:  # type: ignore[type-arg]
        async for values in stream.take(batch, within=0.2):
            store.incrby(redis_key, len(values))

    return app


def main(argv: list[str] | None = None) -> None:
    """Run the counting worker in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--redis-key", required=True)
    parser.add_argument("--group", default="ldp-probe")
    args = parser.parse_args(argv)
    cfg = ServicesConfig.from_env()
    logging.basicConfig(level=logging.WARNING)
    app = build_app(args.topic, args.redis_key, args.group, cfg)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
