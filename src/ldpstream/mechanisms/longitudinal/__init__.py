"""Longitudinal mechanisms: privacy that does not fade when a device reports every window, forever (memoization).

Sequential composition makes T fresh eps-LDP reports of one value T eps-LDP. The mechanisms here memoize a permanent
response per (device, value) at eps_lifetime and perturb it afresh per report, so that any number of reports of one
value stays eps_lifetime-LDP while one report alone is eps_1-LDP (`ldpstream.mechanisms.longitudinal.base`): L-GRR,
L-OUE, L-OSUE, L-SUE (`two_stage`), RAPPOR (`rappor`), Microsoft's 1BitMean and dBitFlip (`one_bit_mean`, `dbitflip`).
The memo is a keyed hash of a device secret (`memo`): no table to keep.
"""

from ldpstream.mechanisms.longitudinal.base import Longitudinal
from ldpstream.mechanisms.longitudinal.dbitflip import DBitFlip
from ldpstream.mechanisms.longitudinal.one_bit_mean import OneBitMean
from ldpstream.mechanisms.longitudinal.rappor import RAPPOR
from ldpstream.mechanisms.longitudinal.two_stage import LGRR, LOSUE, LOUE, LSUE, TwoStageOracle

__all__ = ["LGRR", "LOSUE", "LOUE", "LSUE", "RAPPOR", "DBitFlip", "Longitudinal", "OneBitMean", "TwoStageOracle"]
