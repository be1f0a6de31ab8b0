"""Checks of values parsed from YAML or JSON, with pydantic v2's lax-mode rules and messages, and frozen records
checked field by field by a table of them (`Record`): what `ldpstream.contract.spec` builds collection specs from,
without pydantic on a device's import path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

# The checks. Each takes a value from parsed YAML or JSON and returns it converted, or raises `Invalid` with the
# problems found (location relative to the value, message). A validator's own rule raises ValueError, reported at its
# field as "Value error, ...". `Invalid` is no ValueError, so the two stay apart.

Loc = tuple[Any, ...]
Check = Callable[[Any], Any]
M = TypeVar("M", bound="Record")


class Invalid(Exception):
    """Problems found by a check: (location relative to the value, message) pairs; callers turn it into their error."""

    def __init__(self, errors: list[tuple[Loc, str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def invalid(message: str) -> Invalid:
    return Invalid([((), message)])


def within(prefix: Loc, exc: Invalid) -> list[tuple[Loc, str]]:
    return [((*prefix, *loc), message) for loc, message in exc.errors]


def printable(text: str) -> str:
    """`text` with each lone surrogate (JSON can hold one) shown as replacement characters, as pydantic did."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _key(key: Any) -> Any:
    """A mapping's key as a location names it (YAML's `on:` is the key True, named 1)."""
    if isinstance(key, str):
        return printable(key)
    return int(key) if isinstance(key, bool) else key


def describe(errors: list[tuple[Loc, str]]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in loc) or '<root>'}: {message}" for loc, message in errors)


def _bounds(value: float, gt: float | None, ge: float | None, lt: float | None, le: float | None) -> None:
    if gt is not None and not value > gt:
        raise invalid(f"Input should be greater than {gt}")
    if ge is not None and not value >= ge:
        raise invalid(f"Input should be greater than or equal to {ge}")
    if lt is not None and not value < lt:
        raise invalid(f"Input should be less than {lt}")
    if le is not None and not value <= le:
        raise invalid(f"Input should be less than or equal to {le}")


NOT_UNICODE = "Input should be a valid string, unable to parse raw data as a unicode string"


def _unicode(text: str) -> str:
    """`text`, if it is Unicode text: a lone surrogate (JSON's "\\ud800") is not."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        raise invalid(NOT_UNICODE) from None
    return text


def _not_unicode(text: str) -> bool:
    try:
        _unicode(text)
    except Invalid:
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
            raise invalid(error) from None
    raise invalid("Input should be a valid string")


def declared(check: Check, **rule: Any) -> Check:
    """`check`, carrying the rule it enforces as data (`rule_of`): what tests/vectors/spec_rules.py publishes so that
    every SDK holds a spec's fields to the same bounds."""
    check.rule = {k: v for k, v in rule.items() if v is not None}  # type: ignore[attr-defined]
    return check


def rule_of(check: Check) -> dict[str, Any]:
    """The rule `check` declared (`declared`): its type and bounds, length or pattern; {} if it declared none."""
    return dict(getattr(check, "rule", {}))


def string(min_length: int | None = None, max_length: int | None = None, pattern: str | None = None) -> Check:
    """A string, its length in characters within the bounds, matching `pattern` (whose `$` is the end of the text,
    never before a final newline)."""
    compiled = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern) if pattern else None
    plain = min_length is None and max_length is None and pattern is None  # a checked string is Unicode text

    def check(value: Any) -> str:
        text = _text(value, NOT_UNICODE, surrogates=plain)
        if min_length is not None and len(text) < min_length:
            raise invalid(f"String should have at least {min_length} character{'s' * (min_length != 1)}")
        if max_length is not None and len(text) > max_length:
            raise invalid(f"String should have at most {max_length} character{'s' * (max_length != 1)}")
        if compiled is not None and not compiled.search(text):
            raise invalid(f"String should match pattern '{pattern}'")
        return text

    return declared(check, type="string", min_length=min_length, max_length=max_length, pattern=pattern)


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
    raise invalid("Input should be a valid number, unable to parse string as a number")


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
                raise invalid("Input should be a valid number") from None
        elif isinstance(value, (str, bytes)):
            result = _float_of_text(_text(value, "Input should be a valid number, unable to parse string as a number"))
        else:
            raise invalid("Input should be a valid number")
        if not math.isfinite(result):
            raise invalid("Input should be a finite number")
        _bounds(result, gt, ge, lt, le)
        return result

    return declared(check, type="number", gt=gt, ge=ge, lt=lt, le=le)


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
            raise invalid("Unable to parse input string as an integer, exceeded maximum size")
        return int(text)
    cleaned = _cleaned_int_text(text)
    if cleaned is not None and _INT_TEXT.match(cleaned) and len(cleaned.lstrip("-")) <= MAX_INT_TEXT:
        return int(cleaned)
    raise invalid("Input should be a valid integer, unable to parse string as an integer")


def integer(ge: int | None = None, le: int | None = None) -> Check:
    """An int: an int, an integral float, or the text of an int (lax)."""

    def check(value: Any) -> int:
        if isinstance(value, int):
            result = int(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise invalid("Input should be a finite number")
            if value % 1:
                raise invalid("Input should be a valid integer, got a number with a fractional part")
            if not -2.0 ** 63 < value < 2.0 ** 63:
                raise invalid("Unable to parse input string as an integer, exceeded maximum size")
            result = int(value)
        elif isinstance(value, (str, bytes)):
            result = _int_of_text(_text(value, "Input should be a valid integer, unable to parse string as an "
                                               "integer"))
        else:
            raise invalid("Input should be a valid integer")
        _bounds(result, None, ge, None, le)
        return result

    return declared(check, type="integer", ge=ge, le=le)


def boolean(value: Any) -> bool:
    """true or false (`_misplaced_booleans` lets nothing else reach here from a spec's text)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise invalid("Input should be a valid boolean")


def literal(*choices: str) -> Check:
    """One of the strings `choices`, exactly."""
    quoted = [f"'{c}'" for c in choices]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"

    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise invalid(NOT_UNICODE if isinstance(value, str) and _not_unicode(value) else f"Input should be {expected}")

    return check


def optional(inner: Check) -> Check:
    """None, or what `inner` takes."""
    return declared(lambda value: None if value is None else inner(value), **rule_of(inner), nullable=True)


_SEQUENCES = (list, tuple, set, frozenset)


def list_of(item: Check, min_length: int = 0) -> Check:
    """A list (a tuple or a set also) of what `item` takes, at least `min_length` long."""

    def check(value: Any) -> list[Any]:
        if not isinstance(value, _SEQUENCES):
            raise invalid("Input should be a valid list")
        result, errors = [], []
        for i, v in enumerate(value):
            try:
                result.append(item(v))
            except Invalid as exc:
                errors += within((i,), exc)
        if errors:
            raise Invalid(errors)
        if len(result) < min_length:
            raise invalid(f"List should have at least {min_length} item{'s' * (min_length != 1)} after validation, "
                           f"not {len(result)}")
        return result

    return check


def pair(item: Check) -> Check:
    """A tuple of two of what `item` takes (from a list, a tuple or a set of two)."""

    def check(value: Any) -> tuple[Any, Any]:
        if not isinstance(value, _SEQUENCES):
            raise invalid("Input should be a valid tuple")
        items = list(value)
        if len(items) > 2:
            raise invalid(f"Tuple should have at most 2 items after validation, not {len(items)}")
        result, errors = [], []
        for i in range(2):
            if i >= len(items):
                errors.append(((i,), "Field required"))
                continue
            try:
                result.append(item(items[i]))
            except Invalid as exc:
                errors += within((i,), exc)
        if errors:
            raise Invalid(errors)
        return result[0], result[1]

    return check


def _exact_number(value: Any) -> int | float:
    """An int or a finite float as it is, nothing converted (a mechanism's parameter: the mechanism checks)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    not_float = "Input should be a finite number" if isinstance(value, float) else "Input should be a valid number"
    raise Invalid([(("int",), "Input should be a valid integer"), (("float",), not_float)])


def mechanism_parameters(value: Any) -> dict[str, int | float]:
    """A mechanism's structural parameters by name (`registry.longitudinal_parameters`), e.g. RAPPOR's
    {hashes: 2, bloom_bits: 32, cohorts: 16}; the budgets of the privacy block fix its probabilities."""
    if not isinstance(value, dict):
        raise invalid("Input should be a valid dictionary")
    result, errors = {}, []
    for key, item in value.items():
        name: str | None = None
        try:
            name = _PARAMETER_NAME(key)
        except Invalid as exc:
            errors += within((_key(key), "[key]"), exc)
        try:
            checked = _exact_number(item)
        except Invalid as exc:
            errors += within((_key(key),), exc)
            continue
        if name is not None:
            result[name] = checked
    if errors:
        raise Invalid(errors)
    return result


_PARAMETER_NAME = string(max_length=32)


def then(check: Check, rule: Callable[[Any], Any]) -> Check:
    """`check`, then a field's own rule on what it returned (the rule raises ValueError)."""
    return declared(lambda value: rule(check(value)), **rule_of(check))


REQUIRED: Any = object()


class Record:
    """A frozen record whose fields are checked from a mapping by the table `_fields`: name -> (check, default),
    default `REQUIRED` or a value (a `list` or `dict` default is a fresh copy each time). `_before` may rewrite the
    mapping first; `_after` checks the whole once every field passed (ValueError)."""

    _fields: ClassVar[dict[str, tuple[Check, Any]]]
    error: ClassVar[type[ValueError]] = ValueError  # what the constructor raises, listing every problem

    def __init__(self, **data: Any) -> None:
        """Check `data` as a parsed mapping is checked; `error` listing every problem."""
        try:
            self._fill(data)
        except Invalid as exc:
            raise self.error(describe(exc.errors)) from None

    @classmethod
    def _check(cls: type[M], value: Any) -> M:
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise invalid(f"Input should be a valid dictionary or instance of {cls.__name__}")
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
            raise invalid(f"Value error, {exc}") from None
        if any(isinstance(key, str) and not key.isascii() and _not_unicode(key) for key in data):
            raise invalid(NOT_UNICODE)
        values: dict[str, Any] = {}
        errors: list[tuple[Loc, str]] = []
        for name, (check, default) in self._fields.items():
            if name in data:
                try:
                    values[name] = check(data[name])
                except Invalid as exc:
                    errors += within((name,), exc)
                except ValueError as exc:  # the field's own rule
                    errors.append(((name,), f"Value error, {exc}"))
            elif default is REQUIRED:
                errors.append(((name,), "Field required"))
            else:
                values[name] = default.copy() if isinstance(default, (list, dict)) else default
        for key in data:
            if not isinstance(key, str):
                errors.append(((_key(key),), "Keys should be strings"))
            elif key not in self._fields:
                errors.append(((key,), "Extra inputs are not permitted"))
        if errors:
            raise Invalid(errors)
        self.__dict__.update(values)
        try:
            self._after()
        except ValueError as exc:
            raise invalid(f"Value error, {exc}") from None

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
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
