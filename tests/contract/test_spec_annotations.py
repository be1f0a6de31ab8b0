"""An attribute's optional `description` and `unit` (for the analyst's catalogue): checked like every field of a
spec, and absent from the canonical JSON when not given, so the specs published before they existed keep their
bytes and hashes."""

from __future__ import annotations

import hashlib
import json

import pytest

from ldpstream.contract.spec import SpecError, parse_spec

PLAIN = ('{"name": "x", "version": 1, "epsilon": 1, "attributes": [{"name": "a", "type": "numeric", "range": [0, 1]}, '
         '{"name": "b", "type": "categorical", "values": ["p", "q"]}, {"name": "c", "type": "keyvalue", '
         '"keys": ["k"], "range": [0, 1]}, {"name": "d", "type": "string", "max_length": 4}]}')
# the canonical JSON of PLAIN as published before attributes had a description and a unit
BEFORE = ('{"attributes":[{"distribution":"gaussian","mechanism":"auto","name":"a","parameters":{},"range":[0.0,1.0],'
          '"type":"numeric"},{"mechanism":"auto","name":"b","parameters":{},"strategy":null,"type":"categorical",'
          '"values":["p","q"],"workload":null,"zipf_exponent":1.1},{"buckets":null,"keys":["k"],"mechanism":"auto",'
          '"name":"c","padding":1,"pairs_per_device":2.0,"range":[0.0,1.0],"type":"keyvalue","zipf_exponent":1.1},'
          '{"alphabet":null,"distinct":1000,"max_length":4,"mechanism":"auto","name":"d","top":20,"type":"string",'
          '"zipf_exponent":1.1}],"description":"","epsilon":1.0,"name":"x","one_report_per_window":true,'
          '"partitions":8,"privacy":null,"sampling":"auto","version":1,"windows":["1h"]}')


def test_a_spec_without_them_keeps_its_bytes_and_hash() -> None:
    spec = parse_spec(PLAIN)
    assert spec.canonical_json() == BEFORE
    assert spec.content_hash() == hashlib.sha256(BEFORE.encode()).hexdigest()


def test_every_kind_of_attribute_takes_them_and_they_are_published() -> None:
    data = json.loads(PLAIN)
    for i, attribute in enumerate(data["attributes"]):
        attribute |= {"description": f"attribute {i}, as the analyst reads it", "unit": "°C"}
    spec = parse_spec(json.dumps(data))
    assert [(a.description, a.unit) for a in spec.attributes] == [
        (f"attribute {i}, as the analyst reads it", "°C") for i in range(4)]
    published = json.loads(spec.canonical_json())
    assert [a["unit"] for a in published["attributes"]] == ["°C"] * 4
    assert parse_spec(spec.canonical_json()) == spec
    one = json.loads(PLAIN)
    one["attributes"][0]["unit"] = "ms"
    assert "description" not in json.loads(parse_spec(json.dumps(one)).canonical_json())["attributes"][0]


@pytest.mark.parametrize("field, value, message", [
    ("unit", "", "numeric.unit: String should have at least 1 character"),
    ("unit", "x" * 33, "numeric.unit: String should have at most 32 characters"),
    ("unit", "m\ns", "numeric.unit: String should match pattern"),
    ("description", "d" * 501, "numeric.description: String should have at most 500 characters"),
    ("description", "a\x1b[31mred", "numeric.description: String should match pattern"),
    ("description", 7, "numeric.description: Input should be a valid string"),
    ("unit", True, "unit: a boolean where something else belongs"),
])
def test_bad_ones_are_refused_with_where_and_why(field: str, value: object, message: str) -> None:
    data = json.loads(PLAIN)
    data["attributes"][0][field] = value
    with pytest.raises(SpecError, match=r"attributes\.0\." + message):
        parse_spec(json.dumps(data))


def test_null_is_the_same_as_absent() -> None:
    data = json.loads(PLAIN)
    data["attributes"][0] |= {"unit": None, "description": None}
    assert parse_spec(json.dumps(data)).canonical_json() == BEFORE
