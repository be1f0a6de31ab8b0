"""Collection specs: what devices report and how, published once per (name, version) and named by every report.

A spec is YAML or JSON, validated here. Example (see `examples/diagnostics.yaml`)::

    name: diagnostics
    version: 1
    epsilon: 2.0                  # per report, per window
    sampling: auto                # auto (000 Eq. 12) | one (Harmony) | split (eps/d each) | an integer k
    windows: [1h]                 # tumbling windows by report time; the all-time window is always kept
    one_report_per_window: true
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

Validation is plain Python, one table of checks per class (`_Model`), with the rules the specs have been published
under (pydantic's lax mode, which earlier versions of this module used, and whose canonical JSON every published spec
keeps): an int or a numeric string is taken where a float belongs, an integral float or an integral string where an
int does, UTF-8 bytes (YAML's !!binary) where a string does; nothing infinite or NaN; unknown keys refused; the
attribute's class picked by its `type`; every problem reported at once, `location: message; location: message`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from ldpstream.contract.topics import raw_topic, report_topic
from ldpstream.contract.untrusted import rejecting
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.workloads import WORKLOAD_NAMES

NAME = r"^[a-z][a-z0-9_\-]{0,62}$"
WINDOW = re.compile(r"^(\d+)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
ALL_TIME = "all"
FACTORIZATION = "factorization"
MAX_SPEC_SIZE = 256 * 1024  # characters of text, or bytes; a spec of 10,000 categorical values is about 150 KB
MAX_WINDOW_SECONDS = 3650 * 86400  # ten years: window starts in ms stay far inside int64


class SpecError(ValueError):
    """A collection spec is invalid; the message says where and why."""


# ---------------------------------------------------------------------------------------------------------------------
# The checks. Each takes a value from parsed YAML or JSON and returns it converted, or raises `_Invalid` with the
# problems found (location relative to the value, message). A validator's own rule raises ValueError, reported at its
# field as "Value error, ...". `_Invalid` is no ValueError, so the two stay apart.

Loc = tuple[Any, ...]
Check = Callable[[Any], Any]
M = TypeVar("M", bound="_Model")


class _Invalid(Exception):  # internal: never leaves this module (`SpecError` does)
    def __init__(self, errors: list[tuple[Loc, str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def _invalid(message: str) -> _Invalid:
    return _Invalid([((), message)])


def _within(prefix: Loc, exc: _Invalid) -> list[tuple[Loc, str]]:
    return [((*prefix, *loc), message) for loc, message in exc.errors]


def _printable(text: str) -> str:
    """`text` with each lone surrogate (JSON can hold one) shown as replacement characters, as pydantic did."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _key(key: Any) -> Any:
    """A mapping's key as a location names it (YAML's `on:` is the key True, named 1)."""
    if isinstance(key, str):
        return _printable(key)
    return int(key) if isinstance(key, bool) else key


def _describe(errors: list[tuple[Loc, str]]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in loc) or '<root>'}: {message}" for loc, message in errors)


def _bounds(value: float, gt: float | None, ge: float | None, lt: float | None, le: float | None) -> None:
    if gt is not None and not value > gt:
        raise _invalid(f"Input should be greater than {gt}")
    if ge is not None and not value >= ge:
        raise _invalid(f"Input should be greater than or equal to {ge}")
    if lt is not None and not value < lt:
        raise _invalid(f"Input should be less than {lt}")
    if le is not None and not value <= le:
        raise _invalid(f"Input should be less than or equal to {le}")


NOT_UNICODE = "Input should be a valid string, unable to parse raw data as a unicode string"


def _unicode(text: str) -> str:
    """`text`, if it is Unicode text: a lone surrogate (JSON's "\\ud800") is not."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        raise _invalid(NOT_UNICODE) from None
    return text


def _not_unicode(text: str) -> bool:
    try:
        _unicode(text)
    except _Invalid:
        return True
    return False


def _text(value: Any, error: str, surrogates: bool = False) -> str:
    """A str (with a lone surrogate only if `surrogates`), or UTF-8 bytes decoded; `error` for bytes that are not
    UTF-8."""
    if isinstance(value, str):
        return value if surrogates else _unicode(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _invalid(error) from None
    raise _invalid("Input should be a valid string")


def string(min_length: int | None = None, max_length: int | None = None, pattern: str | None = None) -> Check:
    """A string, its length in characters within the bounds, matching `pattern` (whose `$` is the end of the text,
    never before a final newline)."""
    compiled = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern) if pattern else None
    plain = min_length is None and max_length is None and pattern is None  # a checked string is Unicode text

    def check(value: Any) -> str:
        text = _text(value, NOT_UNICODE, surrogates=plain)
        if min_length is not None and len(text) < min_length:
            raise _invalid(f"String should have at least {min_length} character{'s' * (min_length != 1)}")
        if max_length is not None and len(text) > max_length:
            raise _invalid(f"String should have at most {max_length} character{'s' * (max_length != 1)}")
        if compiled is not None and not compiled.search(text):
            raise _invalid(f"String should match pattern '{pattern}'")
        return text

    return check


_WHITESPACE = " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
              "\u2028\u2029\u202f\u205f\u3000"  # what a number's text may have around it (Unicode White_Space)
_FLOAT_TEXT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)\Z",
                         re.IGNORECASE)
_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")  # a JSON int
MAX_INT_TEXT = 4300  # characters: Python's own limit on int(str)


def _without_underscores(text: str) -> str | None:
    """`text` without its underscores, if they stand only between other characters, one at a time (1_000)."""
    if "_" not in text or text.startswith("_") or text.endswith("_") or "__" in text:
        return None
    return text.replace("_", "")


def _float_of_text(text: str) -> float:
    for candidate in (text.strip(_WHITESPACE), _without_underscores(text)):
        if candidate is not None and _FLOAT_TEXT.match(candidate):
            return float(candidate)
    raise _invalid("Input should be a valid number, unable to parse string as a number")


def number(gt: float | None = None, ge: float | None = None, lt: float | None = None,
           le: float | None = None) -> Check:
    """A finite float: a float, an int, or the text of a number (lax)."""

    def check(value: Any) -> float:
        if isinstance(value, float):
            result = value
        elif isinstance(value, int):
            try:
                result = float(value)
            except OverflowError:
                raise _invalid("Input should be a valid number") from None
        elif isinstance(value, (str, bytes)):
            result = _float_of_text(_text(value, "Input should be a valid number, unable to parse string as a number"))
        else:
            raise _invalid("Input should be a valid number")
        if not math.isfinite(result):
            raise _invalid("Input should be a finite number")
        _bounds(result, gt, ge, lt, le)
        return result

    return check


def _leading_zeros_dropped(s: str) -> str | None:
    """`s` from its first significant digit (one zero kept before a dot or alone; underscores among the zeros go)."""
    if not s or s[0] not in "0123456789-":
        return None
    if s[0] != "0":
        return s
    for i in range(1, len(s)):
        if s[i] in "123456789-":
            return s[i:]
        if s[i] == ".":
            return s[i - 1:]
        if s[i] not in "0_":
            return None
    return s[-1]


def _cleaned_int_text(text: str) -> str | None:
    """The text of an int in lax forms (spaces around, a plus sign, leading zeros, underscores, a fraction of zeros:
    " +0_1.00") as plain JSON digits, or None when there is nothing to clean (pydantic-core's `clean_int_str`)."""
    s = text.strip(_WHITESPACE)
    if s.startswith("+"):
        if s[1:].startswith("-"):
            return None
        s = s[1:]
    sign = ""
    if s.startswith("-"):
        if s[1:].startswith(("-", "+")):
            return None
        sign, s = "-", s[1:]
    dropped = _leading_zeros_dropped(s)
    if dropped is None:
        return None
    s = dropped
    dot = s.find(".")
    if dot >= 0 and s[dot + 1:] and set(s[dot + 1:]) == {"0"}:
        s = s[:dot]
    plain = _without_underscores(s)
    if plain is not None:
        return sign + plain
    return None if len(s) == len(text) else sign + s


def _int_of_text(text: str) -> int:
    if _INT_TEXT.match(text):
        if len(text.lstrip("-")) > MAX_INT_TEXT:
            raise _invalid("Unable to parse input string as an integer, exceeded maximum size")
        return int(text)
    cleaned = _cleaned_int_text(text)
    if cleaned is not None and _INT_TEXT.match(cleaned) and len(cleaned.lstrip("-")) <= MAX_INT_TEXT:
        return int(cleaned)
    raise _invalid("Input should be a valid integer, unable to parse string as an integer")


def integer(ge: int | None = None, le: int | None = None) -> Check:
    """An int: an int, an integral float, or the text of an int (lax)."""

    def check(value: Any) -> int:
        if isinstance(value, int):
            result = int(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise _invalid("Input should be a finite number")
            if value % 1:
                raise _invalid("Input should be a valid integer, got a number with a fractional part")
            if not -2.0 ** 63 < value < 2.0 ** 63:
                raise _invalid("Unable to parse input string as an integer, exceeded maximum size")
            result = int(value)
        elif isinstance(value, (str, bytes)):
            result = _int_of_text(_text(value, "Input should be a valid integer, unable to parse string as an "
                                               "integer"))
        else:
            raise _invalid("Input should be a valid integer")
        _bounds(result, None, ge, None, le)
        return result

    return check


def boolean(value: Any) -> bool:
    """true or false (`_misplaced_booleans` lets nothing else reach here from a spec's text)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _invalid("Input should be a valid boolean")


def literal(*choices: str) -> Check:
    """One of the strings `choices`, exactly."""
    quoted = [f"'{c}'" for c in choices]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise _invalid(NOT_UNICODE if isinstance(value, str) and _not_unicode(value) else f"Input should be {expected}")

    return check


def optional(inner: Check) -> Check:
    """None, or what `inner` takes."""
    return lambda value: None if value is None else inner(value)


_SEQUENCES = (list, tuple, set, frozenset)


def list_of(item: Check, min_length: int = 0) -> Check:
    """A list (a tuple or a set also) of what `item` takes, at least `min_length` long."""

    def check(value: Any) -> list[Any]:
        if not isinstance(value, _SEQUENCES):
            raise _invalid("Input should be a valid list")
        result, errors = [], []
        for i, v in enumerate(value):
            try:
                result.append(item(v))
            except _Invalid as exc:
                errors += _within((i,), exc)
        if errors:
            raise _Invalid(errors)
        if len(result) < min_length:
            raise _invalid(f"List should have at least {min_length} item{'s' * (min_length != 1)} after validation, "
                           f"not {len(result)}")
        return result

    return check


def pair(item: Check) -> Check:
    """A tuple of two of what `item` takes (from a list, a tuple or a set of two)."""

    def check(value: Any) -> tuple[Any, Any]:
        if not isinstance(value, _SEQUENCES):
            raise _invalid("Input should be a valid tuple")
        items = list(value)
        if len(items) > 2:
            raise _invalid(f"Tuple should have at most 2 items after validation, not {len(items)}")
        result, errors = [], []
        for i in range(2):
            if i >= len(items):
                errors.append(((i,), "Field required"))
                continue
            try:
                result.append(item(items[i]))
            except _Invalid as exc:
                errors += _within((i,), exc)
        if errors:
            raise _Invalid(errors)
        return result[0], result[1]

    return check


def _exact_number(value: Any) -> int | float:
    """An int or a finite float as it is, nothing converted (a mechanism's parameter: the mechanism checks)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    not_float = "Input should be a finite number" if isinstance(value, float) else "Input should be a valid number"
    raise _Invalid([(("int",), "Input should be a valid integer"), (("float",), not_float)])


def mechanism_parameters(value: Any) -> dict[str, int | float]:
    """A mechanism's structural parameters by name (`registry.longitudinal_parameters`), e.g. RAPPOR's
    {hashes: 2, bloom_bits: 32, cohorts: 16}; the budgets of the privacy block fix its probabilities."""
    if not isinstance(value, dict):
        raise _invalid("Input should be a valid dictionary")
    result, errors = {}, []
    for key, item in value.items():
        name: str | None = None
        try:
            name = _PARAMETER_NAME(key)
        except _Invalid as exc:
            errors += _within((_key(key), "[key]"), exc)
        try:
            checked = _exact_number(item)
        except _Invalid as exc:
            errors += _within((_key(key),), exc)
            continue
        if name is not None:
            result[name] = checked
    if errors:
        raise _Invalid(errors)
    return result


_PARAMETER_NAME = string(max_length=32)


def then(check: Check, rule: Callable[[Any], Any]) -> Check:
    """`check`, then a field's own rule on what it returned (the rule raises ValueError)."""
    return lambda value: rule(check(value))


_REQUIRED: Any = object()


class _Model:
    """A frozen record whose fields are checked from a mapping by the table `_fields`: name -> (check, default),
    default `_REQUIRED` or a value (a `list` or `dict` default is a fresh copy each time). `_before` may rewrite the
    mapping first; `_after` checks the whole once every field passed (ValueError)."""

    _fields: ClassVar[dict[str, tuple[Check, Any]]]

    def __init__(self, **data: Any) -> None:
        """Check `data` as a spec's mapping is checked; SpecError listing every problem."""
        try:
            self._fill(data)
        except _Invalid as exc:
            raise SpecError(_describe(exc.errors)) from None

    @classmethod
    def _check(cls: type[M], value: Any) -> M:
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise _invalid(f"Input should be a valid dictionary or instance of {cls.__name__}")
        model = cls.__new__(cls)
        model._fill(value)
        return model

    @classmethod
    def _before(cls, data: dict[Any, Any]) -> dict[Any, Any]:
        return data

    def _after(self) -> None:
        pass

    def _fill(self, data: dict[Any, Any]) -> None:
        try:
            data = self._before(data)
        except ValueError as exc:
            raise _invalid(f"Value error, {exc}") from None
        if any(isinstance(key, str) and not key.isascii() and _not_unicode(key) for key in data):
            raise _invalid(NOT_UNICODE)
        values: dict[str, Any] = {}
        errors: list[tuple[Loc, str]] = []
        for name, (check, default) in self._fields.items():
            if name in data:
                try:
                    values[name] = check(data[name])
                except _Invalid as exc:
                    errors += _within((name,), exc)
                except ValueError as exc:  # the field's own rule
                    errors.append(((name,), f"Value error, {exc}"))
            elif default is _REQUIRED:
                errors.append(((name,), "Field required"))
            else:
                values[name] = default.copy() if isinstance(default, (list, dict)) else default
        for key in data:
            if not isinstance(key, str):
                errors.append(((_key(key),), "Keys should be strings"))
            elif key not in self._fields:
                errors.append(((key,), "Extra inputs are not permitted"))
        if errors:
            raise _Invalid(errors)
        self.__dict__.update(values)
        try:
            self._after()
        except ValueError as exc:
            raise _invalid(f"Value error, {exc}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: replace(...) makes a changed copy")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON data (a new dict; tuples as lists, nested records as dicts), every field present."""
        return {name: _plain(getattr(self, name)) for name in self._fields}

    def replace(self: M, **changes: Any) -> M:
        """A copy with `changes`, checked again as a whole (SpecError): e.g. spec.replace(name="other")."""
        return type(self)(**{**self.to_dict(), **{k: _plain(v) for k, v in changes.items()}})


def _plain(value: Any) -> Any:
    if isinstance(value, _Model):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


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


class NumericAttribute(_Model):
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
        "name": (_NAME, _REQUIRED),
        "type": (literal("numeric"), "numeric"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "range": (then(pair(_ANY_FLOAT), _ordered), _REQUIRED),
        "mechanism": (then(string(), lambda v: known_mechanism(
            v, "numeric mechanism", sorted(registry.NUMERIC) + memoized_names("numeric")
            + sorted(registry.DISTRIBUTION))), "auto"),
        "parameters": (mechanism_parameters, {}),
        "distribution": (literal("gaussian", "uniform", "power_law"), "gaussian"),
    }


class CategoricalAttribute(_Model):
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
        "name": (_NAME, _REQUIRED),
        "type": (literal("categorical"), "categorical"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "values": (then(list_of(string(), min_length=2), _distinct("categorical values")), _REQUIRED),
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


class KeyValueAttribute(_Model):
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
        "name": (_NAME, _REQUIRED),
        "type": (literal("keyvalue"), "keyvalue"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "keys": (optional(then(list_of(string(), min_length=1), _distinct("keys"))), None),
        "buckets": (optional(integer(ge=1, le=1 << 16)), None),
        "range": (then(pair(_ANY_FLOAT), _ordered), _REQUIRED),
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


class StringAttribute(_Model):
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
        "name": (_NAME, _REQUIRED),
        "type": (literal("string"), "string"),
        "description": (DESCRIPTION, None),
        "unit": (UNIT, None),
        "max_length": (integer(ge=1, le=64), _REQUIRED),
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
        raise _invalid("Input should be a valid dictionary or object to extract fields from")
    if "type" not in value:
        raise _invalid("Unable to extract tag using discriminator 'type'")
    tag = value["type"]
    cls = ATTRIBUTE_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise _invalid(f"Input tag '{_printable(str(tag))}' found using 'type' does not match any of the expected "
                       f"tags: {', '.join(repr(t) for t in ATTRIBUTE_TYPES)}")
    try:
        return cls._check(value)
    except _Invalid as exc:
        raise _Invalid(_within((tag,), exc)) from None


class Privacy(_Model):
    """A device's two guarantees: one report is `per_report`-LDP, all its reports together `lifetime`-LDP while
    each attribute it reports takes at most `values` distinct values (module docstring)."""

    per_report: float
    lifetime: float
    values: int

    _fields = {
        "per_report": (number(gt=0, le=50), _REQUIRED),
        "lifetime": (number(gt=0, le=500), _REQUIRED),
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


class Shuffle(_Model):
    """A shuffled collection (`ldpstream.shuffler`): the central `delta` its accounting is stated at, the fewest
    reports a window's batch must hold before it is shuffled and released (`min_batch`; a smaller one rolls into the
    next window, never dropped), and how long after a window's end the edge still admits its reports (`grace_s`:
    the shuffler closes the window after that)."""

    delta: float
    min_batch: int
    grace_s: int

    _fields = {
        "delta": (number(gt=0, lt=1e-3), _REQUIRED),
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
    except _Invalid as exc:
        name_error = exc
    try:
        return _SAMPLING_K(value)  # type: ignore[no-any-return]
    except _Invalid as exc:
        raise _Invalid(_within(("literal['auto','one','split']",), name_error)
                       + _within(("constrained-int",), exc)) from None


def _windows(v: list[str]) -> list[str]:
    for w in v:
        if w != ALL_TIME and not WINDOW.match(w):
            raise ValueError(f"window {w!r} is not like 30s, 15m, 1h, 1d or 'all'")
        if w != ALL_TIME and not 0 < window_seconds(w) <= MAX_WINDOW_SECONDS:
            raise ValueError(f"window {w!r} must be positive and at most {MAX_WINDOW_SECONDS // 86400}d")
    return sorted(set(v) - {ALL_TIME}, key=window_seconds)


class CollectionSpec(_Model):
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

    _fields = {
        "name": (_NAME, _REQUIRED),
        "version": (integer(ge=1), _REQUIRED),
        "epsilon": (number(gt=0, le=50), _REQUIRED),
        "attributes": (list_of(attribute, min_length=1), _REQUIRED),
        "privacy": (optional(Privacy._check), None),
        "shuffle": (optional(Shuffle._check), None),
        "sampling": (sampling_choice, "auto"),
        "windows": (then(list_of(string()), _windows), ["1h"]),
        "one_report_per_window": (boolean, True),
        "partitions": (integer(ge=1, le=1024), 8),
        "description": (string(), ""),
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
        """The spec as JSON, keys sorted, no spaces: what is signed and published (a spec without `shuffle`, or an
        attribute without `description` or `unit`, has no such key, so the specs published before they existed keep
        their bytes and hashes)."""
        data = self.to_dict()
        if data["shuffle"] is None:
            del data["shuffle"]
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
    except _Invalid as exc:
        raise SpecError(_describe(exc.errors)) from None


def load_spec(path: str | Path) -> CollectionSpec:
    """Read and validate a spec file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read spec {p}: {exc.strerror}") from exc
    return parse_spec(text, str(p))
