"""Frequency oracles: epsilon-LDP histograms of one categorical attribute with K values (004, 002, 001).

GRR (direct encoding), SUE and OUE (unary encoding), BLH and OLH (local hashing), and the Hadamard response;
`choose_frequency` picks the one with the lowest variance for a given epsilon and K.
"""

from ldp.frequency.auto import choose_frequency
from ldp.frequency.base import FrequencyOracle
from ldp.frequency.grr import GRR
from ldp.frequency.hadamard import HadamardResponse
from ldp.frequency.local_hash import BLH, OLH
from ldp.frequency.unary import OUE, SUE

__all__ = ["BLH", "GRR", "OLH", "OUE", "SUE", "FrequencyOracle", "HadamardResponse", "choose_frequency"]
