"""Frequency oracles: epsilon-LDP histograms of one categorical attribute with K values (004, 002, 001).

GRR (direct encoding), SUE and OUE (unary encoding), BLH and OLH (local hashing), and the Hadamard response;
`choose_frequency` picks the one with the lowest variance for a given epsilon and K.
"""

from ldpstream.mechanisms.frequency.auto import choose_frequency
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.frequency.grr import GRR
from ldpstream.mechanisms.frequency.hadamard import HadamardResponse
from ldpstream.mechanisms.frequency.local_hash import BLH, OLH
from ldpstream.mechanisms.frequency.unary import OUE, SUE

__all__ = ["BLH", "GRR", "OLH", "OUE", "SUE", "FrequencyOracle", "HadamardResponse", "choose_frequency"]
