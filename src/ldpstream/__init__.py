"""ldpstream: private telemetry over Kafka under epsilon-local differential privacy.

One namespace, layered bottom to top (every import points down, `tests/test_layers.py`):

- `ldpstream.mechanisms`: the LDP mechanisms, pure numpy;
- `ldpstream.contract`: what devices and servers share (specs, the wire format, pseudonyms, request signatures);
- `ldpstream.device`: the device SDK (the base install); `ldpstream.runtime`: the servers' plumbing;
- `ldpstream.simulator`, `ldpstream.edge`, `ldpstream.aggregator`, `ldpstream.shuffler`, `ldpstream.sgd`: the
  services;
- `ldpstream.readapi`: the read API (`ldp serve`) over the aggregator's store, its console and series;
- `ldpstream.services` and `ldpstream.cli`: the local Kafka and Redis, and the `ldp` command line;
- `ldpstream.Client` (`ldpstream.client`): the read API from Python, series as pandas DataFrames and Parquet.

Importing `ldpstream` loads none of them: `ldpstream.Client` is imported when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ldpstream.client import Client

__version__ = "0.1.0"
__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> Any:
    """`ldpstream.Client`, imported on first use (PEP 562)."""
    if name == "Client":
        from ldpstream.client import Client

        return Client
    raise AttributeError(f"module 'ldpstream' has no attribute {name!r}")
