"""Specs shared by the producer tests."""

from __future__ import annotations

import numpy as np

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import CollectionSpec, parse_spec
from ldpstream.contract.wire import DecodedBatch
from ldpstream.mechanisms.mixed import MixedBatch

MIXED = """
name: {name}
version: 1
epsilon: {epsilon}
sampling: {sampling}
windows: [1h]
partitions: 2
attributes:
  - {{name: battery_level, type: numeric, range: [0, 100], distribution: gaussian}}
  - {{name: memory_used, type: numeric, range: [0, 8192], distribution: uniform}}
  - {{name: screen_minutes, type: numeric, range: [0, 1440], distribution: power_law}}
  - {{name: display_mode, type: categorical, values: [light, dark, auto]}}
  - {{name: network, type: categorical, values: [wifi, 5g, 4g, 3g, offline, other], zipf_exponent: 1.3}}
"""


def mixed_spec(name: str = "test-mixed", epsilon: float = 2.0, sampling: str | int = "auto") -> CollectionSpec:
    return parse_spec(MIXED.format(name=name, epsilon=epsilon, sampling=sampling))


def as_mixed(spec: CollectionSpec, decoded: DecodedBatch) -> MixedBatch:
    """The aggregator's view: a decoded envelope back as the collector's batch (flat columns reshaped)."""
    collector = collector_for(spec)
    rows = {a.name: np.zeros(0, dtype=np.int64) for a in spec.attributes}
    reports = {a.name: {c.name: np.zeros((0, *c.row_shape()), dtype=c.dtype) for c in collector.schemas[a.name].columns}
               for a in spec.attributes}
    for block in decoded.attributes:
        name = spec.attributes[block.attribute].name
        shapes = {c.name: c.row_shape() for c in collector.schemas[name].columns}
        rows[name] = block.rows.astype(np.int64)
        reports[name] = {k: v.reshape(len(block.rows), *shapes[k]) for k, v in block.reports.items()}
    return MixedBatch(len(decoded), rows, reports)
