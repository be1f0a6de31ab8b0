"""Key-value mechanisms: each device holds a set of (key, value) pairs; one report estimates every key's frequency
and the mean of its values (`base`). PrivKV (`privkv`), PCKV-UE and PCKV-GRR (`pckv`). Registered apart
(`ldpstream.mechanisms.registry.KEYVALUE`): `auto` for a categorical or numeric attribute never picks them.
"""

from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism, pairs_array
from ldpstream.mechanisms.keyvalue.pckv import PCKVGRR, PCKVUE
from ldpstream.mechanisms.keyvalue.privkv import PrivKV

__all__ = ["PCKVGRR", "PCKVUE", "KeyValueMechanism", "PrivKV", "pairs_array"]
