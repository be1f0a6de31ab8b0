"""aggregator: the stream processor (decode, validate, accumulate into Redis, estimates API, metrics)."""
