"""Collection specs: what devices report and how, published once per (name, version) and named by every report.

A spec is YAML or JSON, validated here. Example (see `examples/diagnostics.yaml`)::

    name: diagnostics
    version: 1
    epsilon: 2.0                  # per report, per window
    sampling: auto                # auto (000 Eq. 12) | one (Harmony) | split (eps/d each) | an integer k
    windows: [1h]                 # tumbling windows by report time; the all-time window is always kept
    one_report_per_window: true
    grace_s: 7200                 # optional: the edge admits a window's reports until 2 h after its end
    attributes:
      - {name: battery_level, type: numeric, range: [0, 100], mechanism: auto,
         description: Charge left, unit: "%"}     # description and unit: optional, for the analyst's catalogue
      - {name: display_mode, type: categorical, values: [light, dark], mechanism: auto}
      - {name: screen_minutes, type: keyvalue, keys: [chat, video], range: [0, 600], padding: 2}  # per-app pairs
      - {name: latency_ms, type: numeric, range: [0, 2000], mechanism: sw, parameters: {bins: 128}}

A numeric attribute asks for its distribution (density, CDF, quantiles, range probabilities, beside its mean) by
naming a distribution mechanism of `ldpstream.mechanisms.distribution` (`sw`: Square Wave with EMS, parameters bins and
smoothing; `hh`: hierarchical histograms for range queries, parameters bins and fanout), whose `parameters` are checked
here by building it; nothing else of the spec changes, so specs without one keep
their canonical JSON.

Privacy over time: instead of `epsilon`, a spec may state both guarantees of a device that reports every window,

    privacy: {per_report: 1.0, lifetime: 4.0}   # eps_1 of one report, eps_inf of all of them (values: 1)

Then every attribute is reported by a memoized mechanism of `ldpstream.mechanisms.longitudinal` (`mechanism: auto` picks
one), each of the k attributes a report carries at (lifetime / (k * values), per_report / k): all the reports of a
device about `values` distinct values of each attribute stay lifetime-LDP, however many windows
(`ldpstream.mechanisms.mixed`, and the device's ledger refuses what would go beyond, `ldpstream.device.ledger`).
`epsilon` is then per_report (it may be given too, equal). A spec without `privacy` composes: T reports cost T eps. A
memoized attribute may set its mechanism's structural parameters
(`ldpstream.mechanisms.registry.longitudinal_parameters`), checked here by building it (`parameter_error`):

    - {name: app, type: categorical, values: [...], mechanism: rappor,
       parameters: {hashes: 2, bloom_bits: 32, cohorts: 16}}      # dbitflip: {sampled: d}; 1bitmean: {buckets: s}

The stage probabilities (RAPPOR's f, p, q; the output perturbation gamma) are solved from the two budgets.

Specs are read from the specs topic, so `parse_spec` takes outside bytes: whatever they are, it returns a valid
spec or raises `SpecError`, nothing else. A spec is at most `MAX_SPEC_SIZE` long and a tree: YAML aliases are
refused (JSON has none; an alias can make a small text a huge or recursive structure, "billion laughs").

Validation is plain Python, one table of checks per class (`ldpstream.contract.checks.Record`), with the rules the
specs have been published under (pydantic's lax mode, which earlier versions of this module used, and whose canonical
JSON every published spec keeps): an int or a numeric string is taken where a float belongs, an integral float or an
integral string where an int does, UTF-8 bytes (YAML's !!binary) where a string does; nothing infinite or NaN; unknown
keys refused; the attribute's class picked by its `type`; every problem reported at once, `location: message;
location: message`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from ldpstream.contract.checks import (
    REQUIRED,
    Invalid,
    Record,
    boolean,
    describe,
    integer,
    invalid,
    list_of,
    literal,
    mechanism_parameters,
    number,
    optional,
    pair,
    printable,
    string,
    then,
    within,
)
from ldpstream.contract.topics import raw_topic, report_topic
from ldpstream.contract.untrusted import rejecting
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.names import WORKLOAD_NAMES

NAME = r"^[a-z][a-z0-9_\-]{0,62}$"
WINDOW = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
ALL_TIME = "all"
FACTORIZATION = "factorization"
MAX_SPEC_SIZE = 256 * 1024  # characters of text, or bytes; a spec of 10,000 categorical values is about 150 KB
MAX_WINDOW_SECONDS = 3650 * 86400  # ten years: window starts in ms stay far inside int64
MAX_GRACE_S = 7 * 86400  # the longest a window may stay open for late reports after its end (`grace_s`)


class SpecError(ValueError):
    """A collection spec is invalid; the message says where and why."""


class _SpecRecord(Record):
    """A part of a spec: its constructor raises SpecError."""

    error = SpecError


def known_mechanism(name: str, kind: str, known: Iterable[str], also: tuple[str, ...] = ("auto",)) -> str:
    """`name` if it is one of `also` or `known`; otherwise a ValueError naming them (an attribute's validator)."""
    choices = [*also, *known]
    if name not in choices:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(choices)}")
    return name


def memoized_names(kind: Literal["frequency", "numeric"]) -> list[str]:
    """The registered longitudinal (memoized) mechanisms of one kind, sorted."""
    return sorted(name for name in registry.LONGITUDINAL if registry.longitudinal_class(name).kind == kind)


NOMINAL_BUDGETS = (2.0, 1.0)  # (lifetime, per report) at which a spec's parameters alone are checked


def parameter_error(mechanism: str, parameters: Mapping[str, int | float], domain: int | None) -> str | None:
    """Why an attribute's mechanism cannot take its `parameters` (None if it can): they go with a named memoized or
    distribution mechanism, by its names, with values it accepts (built at NOMINAL_BUDGETS, a distribution mechanism at
    the per-report one; the collector checks the budgets)."""
    if mechanism not in registry.LONGITUDINAL and mechanism not in registry.DISTRIBUTION:
        return (f"parameters go with a named memoized mechanism ({', '.join(sorted(registry.LONGITUDINAL))}) or "
                f"distribution mechanism ({', '.join(sorted(registry.DISTRIBUTION))}), not {mechanism!r}")
    try:
        if mechanism in registry.DISTRIBUTION:
            registry.make_distribution(mechanism, NOMINAL_BUDGETS[1], **parameters)
        else:
            registry.make_longitudinal(mechanism, *NOMINAL_BUDGETS, domain, **parameters)
    except LDPError as exc:
        return str(exc)
    return None


# What an analyst reads about an attribute (the console's catalogue): optional, and left out of the canonical JSON when
# absent, so the specs published before these fields existed keep their bytes and hashes. Plain text, one line.
DESCRIPTION = optional(string(min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$"))
UNIT = optional(string(min_length=1, max_length=32, pattern=r"^[^\x00-\x1f\x7f]*$"))
OPTIONAL_ATTRIBUTE_FIELDS = ("description", "unit")
_NAME = string(pattern=NAME)
_ANY_FLOAT = number()


def _ordered(v: tuple[float, float]) -> tuple[float, float]:
    if not (v[0] < v[1] and math.isfinite(v[1] - v[0])):
        raise ValueError(f"range must be [lo, hi] with lo < hi (and hi - lo finite), got {list(v)}")
    return v


def _distinct(what: str) -> Callable[[list[str]], list[str]]:
    def rule(v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"{what} must be distinct")
        return v

    return rule


class NumericAttribute(_SpecRecord):
    """A numeric attribute with a declared range, mapped to [-1, 1] for the mechanism."""

    name: str
    type: Literal["numeric"]
    description: str | None
    unit: str | None
    range: tuple[float, float]
    mechanism: str
    parameters: dict[str, int | float]
    distribution: Literal["gaussian", "uniform", "power_law"]  # simulator population only

    _fields = {
        "name": (_NAME, REQUIRED),
        "type": (literal("numeric"), "numeric"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "range": (then(pair(_ANY_FLOAT), _ordered), REQUIRED),
        "mechanism": (then(string(), lambda v: known_mechanism(
            v, "numeric mechanism", sorted(registry.NUMERIC) + memoized_names("numeric")
            + sorted(registry.DISTRIBUTION))), "auto"),
        "parameters": (mechanism_parameters, {}),
        "distribution": (literal("gaussian", "uniform", "power_law"), "gaussian"),
    }


class CategoricalAttribute(_SpecRecord):
    """A categorical attribute over a fixed list of values (codes 0..K-1 in the order given).

    With `mechanism: factorization` it answers a linear-query `workload` over its values (e.g. `prefix`: the CDF)
    with McKenna et al.'s mechanism; `strategy` is the sha256 of the optimised strategy, filled in when the spec
    is published (the strategy itself goes to the `ldp.strategies` topic, so a spec version pins its strategy).
    """

    name: str
    type: Literal["categorical"]
    description: str | None
    unit: str | None
    values: list[str]
    mechanism: str
    parameters: dict[str, int | float]
    workload: str | None
    strategy: str | None
    zipf_exponent: float  # simulator population only

    _fields = {
        "name": (_NAME, REQUIRED),
        "type": (literal("categorical"), "categorical"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "values": (then(list_of(string(), min_length=2), _distinct("categorical values")), REQUIRED),
        "mechanism": (then(string(), lambda v: known_mechanism(
            v, "frequency oracle", sorted(registry.FREQUENCY) + memoized_names("frequency"),
            also=("auto", FACTORIZATION))), "auto"),
        "parameters": (mechanism_parameters, {}),
        "workload": (optional(string()), None),
        "strategy": (optional(string(pattern=r"^[0-9a-f]{64}$")), None),
        "zipf_exponent": (_ANY_FLOAT, 1.1),
    }

    def _after(self) -> None:
        if (self.mechanism == FACTORIZATION) != (self.workload is not None):
            raise ValueError(f"a workload goes with mechanism {FACTORIZATION!r}, and only with it")
        if self.strategy is not None and self.mechanism != FACTORIZATION:
            raise ValueError(f"a strategy goes with mechanism {FACTORIZATION!r} only")
        if self.workload is not None and self.workload not in WORKLOAD_NAMES:
            raise ValueError(f"unknown workload {self.workload!r}; known: {', '.join(WORKLOAD_NAMES)}")


class KeyValueAttribute(_SpecRecord):
    """Key-value pairs: each device holds a set of (key, value) pairs, values in `range`; one report estimates every
    key's frequency and its mean value (`ldpstream.mechanisms.keyvalue`). Keys come from a list (`keys`, codes 0..d-1 in
    the order given) or an open domain hashed into `buckets` (`code_of`; two keys of one bucket are one key to the
    estimates). `padding` is PCKV's l (a device holding more pairs than l makes its keys' frequencies too small by l /
    |S|). Fresh noise per report: a spec with a lifetime budget (`privacy`) cannot carry one.
    """

    name: str
    type: Literal["keyvalue"]
    description: str | None
    unit: str | None
    keys: list[str] | None
    buckets: int | None
    range: tuple[float, float]
    mechanism: str
    padding: int
    pairs_per_device: float  # simulator population only
    zipf_exponent: float  # simulator population only

    _fields = {
        "name": (_NAME, REQUIRED),
        "type": (literal("keyvalue"), "keyvalue"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "keys": (optional(then(list_of(string(), min_length=1), _distinct("keys"))), None),
        "buckets": (optional(integer(ge=1, le=1 << 16)), None),
        "range": (then(pair(_ANY_FLOAT), _ordered), REQUIRED),
        "mechanism": (then(string(), lambda v: known_mechanism(v, "key-value mechanism", registry.KEYVALUE)), "auto"),
        "padding": (integer(ge=1, le=1024), 1),
        "pairs_per_device": (number(gt=0, le=1024), 2.0),
        "zipf_exponent": (_ANY_FLOAT, 1.1),
    }

    def _after(self) -> None:
        if (self.keys is None) == (self.buckets is None):
            raise ValueError("a keyvalue attribute has either a list of keys or a number of buckets (open domain)")

    @property
    def domain_size(self) -> int:
        """d: the number of keys (or buckets)."""
        return len(self.keys) if self.keys is not None else int(self.buckets)  # type: ignore[arg-type]

    @property
    def labels(self) -> list[str]:
        """The keys' names, or "#0", "#1", ... for the buckets of an open domain."""
        return list(self.keys) if self.keys is not None else [f"#{i}" for i in range(self.domain_size)]

    def code_of(self, key: str) -> int:
        """The code of a key: its index in `keys` (SpecError if unknown), or its bucket, the first 8 bytes of
        blake2b(attribute name, key) modulo `buckets` (the same on every device and aggregator)."""
        if self.keys is not None:
            try:
                return self.keys.index(key)
            except ValueError:
                raise SpecError(f"attribute {self.name!r}: unknown key {key!r}") from None
        digest = hashlib.blake2b(key.encode(), digest_size=8, key=self.name.encode()).digest()
        return int.from_bytes(digest, "little") % self.domain_size


class StringAttribute(_SpecRecord):
    """A string attribute over an open domain: at most `max_length` bytes over `alphabet` (printable ASCII) or any
    non-NUL byte; estimated as its `top` heavy hitters (`ldpstream.mechanisms.open_domain`: mechanism auto, hcms_tree,
    pem
    or sfp)."""

    name: str
    type: Literal["string"]
    description: str | None
    unit: str | None
    max_length: int
    alphabet: str | None
    mechanism: str
    top: int
    distinct: int  # simulator population only
    zipf_exponent: float  # simulator population only

    _fields = {
        "name": (_NAME, REQUIRED),
        "type": (literal("string"), "string"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "max_length": (integer(ge=1, le=64), REQUIRED),
        "alphabet": (optional(string(min_length=1, max_length=95)), None),
        "mechanism": (then(string(), lambda v: known_mechanism(v, "heavy-hitter mechanism", registry.HEAVY_HITTERS)),
                      "auto"),
        "top": (integer(ge=1, le=1000), 20),
        "distinct": (integer(ge=1, le=1_000_000), 1000),
        "zipf_exponent": (_ANY_FLOAT, 1.1),
    }


Attribute = NumericAttribute | CategoricalAttribute | KeyValueAttribute | StringAttribute
ATTRIBUTE_TYPES: dict[str, type[Attribute]] = {"numeric": NumericAttribute, "categorical": CategoricalAttribute,
                                               "keyvalue": KeyValueAttribute, "string": StringAttribute}


def attribute(value: Any) -> Attribute:
    """An attribute of the class its `type` names (in a location, the type follows the index: attributes.0.numeric)."""
    if isinstance(value, (NumericAttribute, CategoricalAttribute, KeyValueAttribute, StringAttribute)):
        return value
    if not isinstance(value, dict):
        raise invalid("Input should be a valid dictionary or object to extract fields from")
    if "type" not in value:
        raise invalid("Unable to extract tag using discriminator 'type'")
    tag = value["type"]
    cls = ATTRIBUTE_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise invalid(f"Input tag '{printable(str(tag))}' found using 'type' does not match any of the expected "
                       f"tags: {', '.join(repr(t) for t in ATTRIBUTE_TYPES)}")
    try:
        return cls._check(value)
    except Invalid as exc:
        raise Invalid(within((tag,), exc)) from None


class Privacy(_SpecRecord):
    """A device's two guarantees: one report is `per_report`-LDP, all its reports together `lifetime`-LDP while
    each attribute it reports takes at most `values` distinct values (module docstring)."""

    per_report: float
    lifetime: float
    values: int

    _fields = {
        "per_report": (number(gt=0, le=50), REQUIRED),
        "lifetime": (number(gt=0, le=500), REQUIRED),
        "values": (integer(ge=1, le=1000), 1),
    }

    def _after(self) -> None:
        if self.per_report > self.lifetime / self.values:
            raise ValueError(f"one report (per_report = {self.per_report:g}) cannot cost more than one value's share "
                             f"of the lifetime budget (lifetime / values = {self.lifetime / self.values:g})")

    @property
    def per_value(self) -> float:
        """The lifetime budget of all the reports about one record (each attribute one value): lifetime / values."""
        return self.lifetime / self.values


class Shuffle(_SpecRecord):
    """A shuffled collection (`ldpstream.shuffler`): the central `delta` its accounting is stated at, the fewest
    reports a window's batch must hold before it is shuffled and released (`min_batch`; a smaller one rolls into the
    next window, never dropped), and how long after a window's end the edge still admits its reports (`grace_s`:
    the shuffler closes the window after that)."""

    delta: float
    min_batch: int
    grace_s: int

    _fields = {
        "delta": (number(gt=0, lt=1e-3), REQUIRED),
        "min_batch": (integer(ge=100, le=100_000_000), 10_000),
        "grace_s": (integer(ge=0, le=3600), 60),
    }


SAMPLING_NAMES = ("auto", "one", "split")
_SAMPLING_NAME = literal(*SAMPLING_NAMES)
_SAMPLING_K = integer(ge=1)


def sampling_choice(value: Any) -> str | int:
    """auto, one, split, or an integer k >= 1 (both reported when neither fits)."""
    try:
        return _SAMPLING_NAME(value)  # type: ignore[no-any-return]
    except Invalid as exc:
        name_error = exc
    try:
        return _SAMPLING_K(value)  # type: ignore[no-any-return]
    except Invalid as exc:
        raise Invalid(within(("literal['auto','one','split']",), name_error)
                       + within(("constrained-int",), exc)) from None


def _windows(v: list[str]) -> list[str]:
    for w in v:
        if w != ALL_TIME and not WINDOW.match(w):
            raise ValueError(f"window {w!r} is not like 30s, 15m, 1h, 1d or 'all'")
        if w != ALL_TIME and not 0 < window_seconds(w) <= MAX_WINDOW_SECONDS:
            raise ValueError(f"window {w!r} must be positive and at most {MAX_WINDOW_SECONDS // 86400}d")
    return sorted(set(v) - {ALL_TIME}, key=window_seconds)


class CollectionSpec(_SpecRecord):
    """A versioned collection: its attributes, privacy budget, sampling, windows and topic layout."""

    name: str
    version: int
    epsilon: float
    attributes: list[Attribute]
    privacy: Privacy | None
    shuffle: Shuffle | None
    sampling: Literal["auto", "one", "split"] | int
    windows: list[str]
    one_report_per_window: bool
    partitions: int
    description: str
    grace_s: int | None

    _fields = {
        "name": (_NAME, REQUIRED),
        "version": (integer(ge=1), REQUIRED),
        "epsilon": (number(gt=0, le=50), REQUIRED),
        "attributes": (list_of(attribute, min_length=1), REQUIRED),
        "privacy": (optional(Privacy._check), None),
        "shuffle": (optional(Shuffle._check), None),
        "sampling": (sampling_choice, "auto"),
        "windows": (then(list_of(string()), _windows), ["1h"]),
        "one_report_per_window": (boolean, True),
        "partitions": (integer(ge=1, le=1024), 8),
        "description": (string(), ""),
        "grace_s": (optional(integer(ge=0, le=MAX_GRACE_S)), None),
    }

    @classmethod
    def _before(cls, data: dict[Any, Any]) -> dict[Any, Any]:
        """`epsilon` is privacy.per_report when the spec states a privacy block (it may repeat it, equal)."""
        if not isinstance(data.get("privacy"), dict):
            return data
        per_report = data["privacy"].get("per_report")
        if "epsilon" not in data:
            return {**data, "epsilon": per_report}
        if data["epsilon"] != per_report:
            raise ValueError(f"epsilon {data['epsilon']!r} and privacy.per_report {per_report!r} differ: state one")
        return data

    def _after(self) -> None:
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"attribute names must be distinct: {names}")
        if isinstance(self.sampling, int) and self.sampling > len(self.attributes):
            raise ValueError(f"sampling k = {self.sampling} exceeds the {len(self.attributes)} attributes")
        keyvalue = [a.name for a in self.attributes if isinstance(a, KeyValueAttribute)]
        if self.privacy is not None and keyvalue:
            raise ValueError(f"keyvalue attributes {keyvalue} are perturbed with fresh noise per report (nothing to "
                             "memoize: a set of pairs changes every report): they cannot keep a lifetime budget")
        strings = [a.name for a in self.attributes if isinstance(a, StringAttribute)]
        if self.privacy is not None and strings:
            raise ValueError(f"string attributes {strings} have no memoized mechanism: a lifetime budget cannot hold")
        memoized = [a.name for a in self.attributes if a.mechanism in registry.LONGITUDINAL]
        if self.privacy is None and memoized:
            raise ValueError(f"attributes {memoized} name memoized mechanisms, which need a privacy block "
                             "{per_report, lifetime}")
        for a in self.attributes:
            if isinstance(a, (NumericAttribute, CategoricalAttribute)) and a.parameters:
                error = parameter_error(a.mechanism, a.parameters,
                                        len(a.values) if isinstance(a, CategoricalAttribute) else None)
                if error:
                    raise ValueError(f"attribute {a.name!r}: {error}")
        if self.shuffle is not None and self.grace_s is not None:
            raise ValueError("a shuffled collection's grace is shuffle.grace_s (the shuffler closes its windows): "
                             "drop grace_s")
        if self.shuffle is not None and not (self.windows and self.one_report_per_window):
            raise ValueError("a shuffled collection needs windows and one report per device per window: the shuffler "
                             "releases each window's batch, one report of each device")
        fresh = [a.name for a in self.attributes if a.mechanism not in registry.LONGITUDINAL and a.mechanism != "auto"]
        if self.privacy is not None and fresh:
            raise ValueError(f"attributes {fresh} use mechanisms with fresh noise per report, whose spend grows with "
                             f"every report: a lifetime budget needs memoized ones (auto, "
                             f"{', '.join(sorted(registry.LONGITUDINAL))})")

    @property
    def topic(self) -> str:
        """The Kafka topic of this collection's reports."""
        return report_topic(self.name)

    @property
    def raw_topic(self) -> str:
        """The topic the edge writes a shuffled collection's reports to (only the shuffler reads it)."""
        return raw_topic(self.name)

    @property
    def key(self) -> str:
        """name@version: how reports and the specs topic name this spec."""
        return f"{self.name}@{self.version}"

    def content_hash(self) -> str:
        """sha256 of the canonical JSON of the spec: a published version is immutable, so its hash is fixed."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def canonical_json(self) -> str:
        """The spec as JSON, keys sorted, no spaces: what is signed and published (a spec without `shuffle` or
        `grace_s`, or an attribute without `description` or `unit`, has no such key, so the specs published before
        they existed keep their bytes and hashes)."""
        data = self.to_dict()
        for key in ("shuffle", "grace_s"):
            if data[key] is None:
                del data[key]
        for attribute in data["attributes"]:
            for key in OPTIONAL_ATTRIBUTE_FIELDS:
                if attribute[key] is None:
                    del attribute[key]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def attribute_index(self, name: str) -> int:
        for i, a in enumerate(self.attributes):
            if a.name == name:
                return i
        raise SpecError(f"collection {self.key} has no attribute {name!r}")


def window_seconds(window: str) -> int:
    """Length of a tumbling window like '1h' in seconds."""
    m = WINDOW.match(window)
    if m is None:
        raise SpecError(f"window {window!r} is not like 30s, 15m, 1h or 1d")
    return int(m.group(1)) * UNIT_SECONDS[m.group(2)]


def parse_spec(text: str | bytes, source: str = "<spec>") -> CollectionSpec:
    """A spec from YAML or JSON text, or its UTF-8 bytes (JSON is YAML); SpecError with every problem listed, and
    nothing else, whatever the input."""
    try:
        return _validated(_mapping(text))
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from exc


@functools.cache
def _tree_loader() -> type:
    """yaml's safe loader, refusing aliases (module docstring); yaml is loaded only for text that is not JSON."""
    import yaml

    class TreeLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, f"a spec takes no aliases (*{event.anchor})",
                                                  event.start_mark)
            return super().compose_node(parent, index)

    return TreeLoader


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a spec takes")


@rejecting(SpecError, "not valid YAML/JSON")
def _mapping(text: str | bytes) -> dict[str, object]:
    """The mapping a spec's text holds: JSON (what is published and served: parsed by the json module, 1000x
    faster), else YAML (yaml raises more than YAMLError: RecursionError, ValueError, ...)."""
    if len(text) > MAX_SPEC_SIZE:
        raise SpecError(f"{len(text):,} characters or bytes; a spec has at most {MAX_SPEC_SIZE:,}")
    string = text.decode() if isinstance(text, bytes) else text
    try:
        data = json.loads(string, parse_constant=_no_constant) if string.lstrip()[:1] == "{" else None
    except ValueError:
        data = None  # not JSON after all: YAML decides (and says what is wrong)
    if data is None:
        import yaml

        data = yaml.load(string, Loader=_tree_loader())
    if not isinstance(data, dict):
        raise SpecError(f"a spec is a mapping, got {type(data).__name__}")
    return data


BOOLEAN_FIELDS = frozenset({"one_report_per_window"})


def _misplaced_booleans(value: object, where: str = "") -> list[str]:
    """Where a boolean stands for something else, or something else for a boolean (pydantic's lax mode would take
    true for 1 and 1 for true: a boolean where a number belongs is not a number)."""
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            if key in BOOLEAN_FIELDS and not where.startswith("attributes"):
                found += [] if isinstance(item, bool) else [f"{at}: a boolean (true or false)"]
            else:
                found += _misplaced_booleans(item, at)
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _misplaced_booleans(item, f"{where}.{i}")]
    return [f"{where}: a boolean where something else belongs"] if isinstance(value, bool) else []


@rejecting(SpecError, "not a valid spec")
def _validated(data: dict[str, object]) -> CollectionSpec:
    """The spec a mapping describes; SpecError with every problem listed."""
    misplaced = _misplaced_booleans(data)
    if misplaced:
        raise SpecError("; ".join(misplaced))
    try:
        return CollectionSpec._check(data)
    except Invalid as exc:
        raise SpecError(describe(exc.errors)) from None


def load_spec(path: str | Path) -> CollectionSpec:
    """Read and validate a spec file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read spec {p}: {exc.strerror}") from exc
    return parse_spec(text, str(p))
