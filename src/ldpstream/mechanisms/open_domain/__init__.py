"""Open-domain collection: frequencies and heavy hitters of strings no one lists in advance.

Sketch frequency oracles (`sketch`: Apple's CMS and HCMS, hashed GRR) over fixed public hashes of strings (`strings`),
and two ways to discover the most frequent strings: prefix trees of them (`tree`: `hcms_tree`, `pem`) and Apple's
sequence fragment puzzle (`sfp`). Registered apart (`ldpstream.mechanisms.registry.OPEN_DOMAIN`), so the closed-domain
`auto` never picks them.
"""

from ldpstream.mechanisms.open_domain.sfp import SFP
from ldpstream.mechanisms.open_domain.sketch import CMS, HCMS, HashedGRR, SketchOracle
from ldpstream.mechanisms.open_domain.strings import StringDomain
from ldpstream.mechanisms.open_domain.tree import PEM, HCMSTree, HeavyHitters, PrefixTree

__all__ = ["CMS", "HCMS", "PEM", "SFP", "HCMSTree", "HashedGRR", "HeavyHitters", "PrefixTree", "SketchOracle",
           "StringDomain"]
