"""ldpstream: private telemetry over Kafka under epsilon-local differential privacy.

One namespace, layered bottom to top (every import points down, `tests/test_layers.py`):

- `ldpstream.mechanisms`: the LDP mechanisms, pure numpy;
- `ldpstream.contract`: what devices and servers share (specs, the wire format, pseudonyms, request signatures);
- `ldpstream.device`: the device SDK (the base install); `ldpstream.runtime`: the servers' plumbing;
- `ldpstream.simulator`, `ldpstream.edge`, `ldpstream.aggregator`, `ldpstream.sgd`: the services;
- `ldpstream.services` and `ldpstream.cli`: the local Kafka and Redis, and the `ldp` command line.

Importing `ldpstream` loads none of them.
"""

__version__ = "0.1.0"
