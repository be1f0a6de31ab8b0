"""One-dimensional numeric mechanisms on [-1, 1] (000 Sec. III, 001 Alg. 2), by their registry names.

`laplace`, `scdf`, `staircase`, `duchi`, `pm`, `hm`, `harmony`; `ldpstream.mechanisms.numeric.auto.choose_numeric` picks
the one with the lowest worst-case variance; `ldpstream.mechanisms.numeric.scaling.RangeScaler` maps an attribute's [lo,
hi] to [-1, 1].
"""

from ldpstream.mechanisms.numeric.base import NumericMechanism, check_unit_values
from ldpstream.mechanisms.numeric.duchi import Duchi
from ldpstream.mechanisms.numeric.harmony import Harmony
from ldpstream.mechanisms.numeric.hybrid import Hybrid
from ldpstream.mechanisms.numeric.laplace import Laplace
from ldpstream.mechanisms.numeric.piecewise import Piecewise
from ldpstream.mechanisms.numeric.scaling import RangeScaler
from ldpstream.mechanisms.numeric.staircase import SCDF, Staircase

__all__ = [
    "SCDF",
    "Duchi",
    "Harmony",
    "Hybrid",
    "Laplace",
    "NumericMechanism",
    "Piecewise",
    "RangeScaler",
    "Staircase",
    "check_unit_values",
]
