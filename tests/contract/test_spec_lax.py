"""The rules specs have always been checked by (pydantic's lax mode, until the checks became plain Python): what is
converted, what is refused, and with which message. Each verdict and message here is what the pydantic version of
`ldpstream.contract.spec` gave for the same text, so a published spec keeps its meaning and its canonical JSON."""

from __future__ import annotations

from typing import Any

import pytest

from ldpstream.contract.spec import CollectionSpec, NumericAttribute, Shuffle, SpecError, parse_spec

BASE = "name: diag\nversion: 2\nepsilon: 2.0\nattributes:\n  - {name: level, type: numeric, range: [0, 100]}\n"


def changed(old: str, new: str) -> str:
    text = BASE.replace(old, new, 1)
    assert text != BASE
    return text


@pytest.mark.parametrize(("old", "new", "field", "value"), [
    ("epsilon: 2.0", 'epsilon: "2"', "epsilon", 2.0),
    ("epsilon: 2.0", 'epsilon: " 2.5 "', "epsilon", 2.5),
    ("epsilon: 2.0", 'epsilon: "1_0"', "epsilon", 10.0),
    ("epsilon: 2.0", "epsilon: 2", "epsilon", 2.0),
    ("version: 2", "version: 2.0", "version", 2),
    ("version: 2", 'version: "2.0"', "version", 2),
    ("version: 2", 'version: "1_0.0"', "version", 10),
    ("version: 2", 'version: " +0_7 "', "version", 7),
    ("version: 2", "version: 123456789012345678901234567890", "version", 123456789012345678901234567890),
    ("name: diag", "name: !!binary ZGlhZw==", "name", "diag"),
    ("epsilon: 2.0", "epsilon: 2.0\nsampling: '1'", "sampling", 1),
    ("epsilon: 2.0", "epsilon: 2.0\nsampling: 1.0", "sampling", 1),
    ("epsilon: 2.0", 'epsilon: 2.0\ndescription: "x\\ud800"', "description", "x\ud800"),  # a plain string: any
    ("epsilon: 2.0", "privacy: {per_report: 1, lifetime: 4}", "epsilon", 1.0),
])
def test_lax_conversions(old: str, new: str, field: str, value: Any) -> None:
    spec = parse_spec(changed(old, new))
    assert getattr(spec, field) == value and type(getattr(spec, field)) is type(value)
    assert parse_spec(spec.canonical_json()) == spec


@pytest.mark.parametrize("new", ["!!set {0, 100}", '["0", 100]', "[0, 100.0]"])
def test_a_range_is_a_tuple_of_floats(new: str) -> None:
    (attribute,) = parse_spec(changed("[0, 100]", new)).attributes
    assert attribute.range == (0.0, 100.0) and all(type(x) is float for x in attribute.range)  # type: ignore[union-attr]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("epsilon: 2.0", 'epsilon: "0x10"', "epsilon: Input should be a valid number, unable to parse string as a number"),
    ("epsilon: 2.0", "epsilon: .nan", "epsilon: Input should be a finite number"),
    ("epsilon: 2.0", 'epsilon: "inf"', "epsilon: Input should be a finite number"),
    ("epsilon: 2.0", "epsilon: 1e400", "epsilon: Input should be a finite number"),
    ("version: 2", "version: 2.5", "version: Input should be a valid integer, got a number with a fractional part"),
    ("version: 2", 'version: "2."', "version: Input should be a valid integer, unable to parse string as an integer"),
    ("version: 2", 'version: "0-4"', "version: Input should be greater than or equal to 1"),
    ("version: 2", "version: 1.0e+19", "version: Unable to parse input string as an integer, exceeded maximum size"),
    ("name: diag", 'name: "diag\\n"', "name: String should match pattern '^[a-z][a-z0-9_\\-]{0,62}$'"),
    ("name: diag", 'name: "d\\ud800"', "name: Input should be a valid string, unable to parse raw data as a unicode "
                                        "string"),
    ("[0, 100]", "[0, 100, 200]", "attributes.0.numeric.range: Tuple should have at most 2 items after validation, "
                                  "not 3"),
    ("[0, 100]", "[0]", "attributes.0.numeric.range.1: Field required"),
    ("epsilon: 2.0", "epsilon: 2.0\nsampling: 0", "sampling.literal['auto','one','split']: Input should be 'auto', "
     "'one' or 'split'; sampling.constrained-int: Input should be greater than or equal to 1"),
    ("type: numeric,", "type: numeric, unit: '',", "attributes.0.numeric.unit: String should have at least 1 "
                                                    "character"),
    ("type: numeric,", "type: nope,", "attributes.0: Input tag 'nope' found using 'type' does not match any of the "
                                      "expected tags: 'numeric', 'categorical', 'keyvalue', 'string'"),
    ("{name: level, type: numeric, ", "{name: level, ", "attributes.0: Unable to extract tag using discriminator "
                                                        "'type'"),
    ("range: [0, 100]", "range: [0, 100], mechanism: sw, parameters: {bins: 16.0}",
     "<root>: Value error, attribute 'level': bins must be an integer in [4, 1024], got 16.0"),
    ("range: [0, 100]", "range: [0, 100], mechanism: sw, parameters: {bins: '16'}",
     "attributes.0.numeric.parameters.bins.int: Input should be a valid integer; "
     "attributes.0.numeric.parameters.bins.float: Input should be a valid number"),
    ("epsilon: 2.0", "epsilon: 2.0\nextra: 1\n1: 2",
     "extra: Extra inputs are not permitted; 1: Keys should be strings"),
    ("epsilon: 2.0", "epsilon: 2.0\non: 2", "1: Keys should be strings"),  # YAML's on is true
    ("epsilon: 2.0", "epsilon: '1'\nprivacy: {per_report: 1.0, lifetime: 4}",
     "<root>: Value error, epsilon '1' and privacy.per_report 1.0 differ: state one"),
])
def test_refusals_say_where_and_why(old: str, new: str, message: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(changed(old, new))
    assert str(error.value) == f"<spec>: {message}"


def test_records_are_frozen_and_replace_checks_again() -> None:
    spec = parse_spec(BASE)
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    assert spec.replace(name="other").key == "other@2" and spec.key == "diag@2"
    with pytest.raises(SpecError, match="epsilon: Input should be less than or equal to 50"):
        spec.replace(epsilon=51)
    with pytest.raises(SpecError, match="attributes.0.numeric.range: Value error, range must be"):
        spec.replace(attributes=[spec.attributes[0].to_dict() | {"range": [1, 0]}])
    assert CollectionSpec(**spec.to_dict()) == spec
    assert NumericAttribute(name="x", range=(0, 1)).range == (0.0, 1.0)
    assert Shuffle(delta=1e-6).to_dict() == {"delta": 1e-6, "min_batch": 10_000, "grace_s": 60}
