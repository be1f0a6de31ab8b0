"""Numeric distributions and quantiles under LDP, by their names in `ldpstream.mechanisms.registry.DISTRIBUTION`.

`sw`: the Square Wave mechanism with EMS reconstruction (Li et al., SIGMOD 2020); `hh`: hierarchical histograms for
range queries (Cormode, Kulkarni, Srivastava, VLDB 2019). Each is a mechanism for one value in [-1, 1] whose estimate is
the mean and whose `distribution(stats)` is a `Distribution` on a grid: density, CDF, quantiles and range
probabilities, with standard errors.
"""

from ldpstream.mechanisms.distribution.base import DEFAULT_QUANTILES, Distribution, DistributionMechanism
from ldpstream.mechanisms.distribution.hierarchy import HierarchicalHistogram
from ldpstream.mechanisms.distribution.square_wave import SquareWave

__all__ = ["DEFAULT_QUANTILES", "Distribution", "DistributionMechanism", "HierarchicalHistogram", "SquareWave"]
