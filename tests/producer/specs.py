"""Specs shared by the producer tests."""

from __future__ import annotations

from producer.spec import CollectionSpec, parse_spec

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
