"""One-dimensional numeric mechanisms on [-1, 1] (000 Sec. III, 001 Alg. 2), by their registry names.

`laplace`, `scdf`, `staircase`, `duchi`, `pm`, `hm`, `harmony`; `ldp.numeric.auto.choose_numeric` picks the one
with the lowest worst-case variance; `ldp.numeric.scaling.RangeScaler` maps an attribute's [lo, hi] to [-1, 1].
"""

from ldp.numeric.base import NumericMechanism, check_unit_values
from ldp.numeric.duchi import Duchi
from ldp.numeric.harmony import Harmony
from ldp.numeric.hybrid import Hybrid
from ldp.numeric.laplace import Laplace
from ldp.numeric.piecewise import Piecewise
from ldp.numeric.scaling import RangeScaler
from ldp.numeric.staircase import SCDF, Staircase

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
