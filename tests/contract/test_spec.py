"""Collection specs: the examples validate, bad specs are refused with a message that says where and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.contract.spec import SpecError, load_spec, parse_spec, window_seconds
from ldpstream.contract.topics import report_topic

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GOOD = """
name: diag
version: 2
epsilon: 2.0
windows: [1d, 1h, all]
attributes:
  - {name: battery_level, type: numeric, range: [0, 100]}
  - {name: display_mode, type: categorical, values: [light, dark]}
"""


def test_example_specs_validate() -> None:
    diagnostics = load_spec(EXAMPLES / "diagnostics.yaml")
    assert diagnostics.key == "diagnostics@1" and diagnostics.topic == "ldp.reports.diagnostics"
    kinds = {a.type for a in diagnostics.attributes}
    assert kinds == {"numeric", "categorical"}
    numeric16 = load_spec(EXAMPLES / "numeric16.yaml")
    assert len(numeric16.attributes) == 16 and all(a.type == "numeric" for a in numeric16.attributes)
    assert {a.distribution for a in numeric16.attributes} == {"gaussian", "uniform", "power_law"}  # type: ignore[union-attr]


def test_good_spec_defaults_and_window_order() -> None:
    spec = parse_spec(GOOD)
    assert spec.windows == ["1h", "1d"]  # sorted by length, 'all' implicit
    assert spec.sampling == "auto" and spec.partitions == 8 and spec.one_report_per_window
    assert spec.attribute_index("display_mode") == 1
    assert window_seconds("15m") == 900 and report_topic("x") == "ldp.reports.x"


def test_canonical_json_is_independent_of_layout() -> None:
    reordered = GOOD.replace("windows: [1d, 1h, all]", "windows: [1h, 1d]")
    assert parse_spec(GOOD).content_hash() == parse_spec(reordered).content_hash()
    assert parse_spec(GOOD).content_hash() != parse_spec(GOOD.replace("2.0", "2.5")).content_hash()


@pytest.mark.parametrize(("change", "message"), [
    (("[0, 100]", "[100, 0]"), "lo < hi"),
    (("epsilon: 2.0", "epsilon: 0"), "epsilon"),
    (("version: 2", "version: 0"), "version"),
    (("[light, dark]", "[light, light]"), "distinct"),
    (("[light, dark]", "[light]"), "at least 2"),
    (("windows: [1d, 1h, all]", "windows: [1w]"), "1w"),
    (("type: numeric, range", "type: numeric, mechanism: nope, range"), "unknown numeric mechanism 'nope'"),
    (("type: categorical,", "type: categorical, mechanism: pm,"), "unknown frequency oracle 'pm'"),
    (("name: diag", "name: Diag!"), "name"),
    (("name: display_mode", "name: battery_level"), "distinct"),
    (("epsilon: 2.0", "epsilon: 2.0\nsampling: 3"), "exceeds the 2 attributes"),
    (("epsilon: 2.0", "epsilon: 2.0\ncolour: red"), "colour"),
])
def test_bad_specs_say_why(change: tuple[str, str], message: str) -> None:
    assert change[0] in GOOD
    with pytest.raises(SpecError, match=message):
        parse_spec(GOOD.replace(*change), "bad.yaml")


def test_not_a_mapping_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a spec is a mapping"):
        parse_spec("- 1\n- 2\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec("name: [unclosed")
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "missing.yaml")
