"""`python -m ldpstream.aggregator`'s options that are checked before anything starts."""

from __future__ import annotations

import pytest

from ldpstream.aggregator.__main__ import main


@pytest.mark.parametrize("given", [["--max-clock-skew-s", "-5"], ["--max-clock-skew-s", "a day"]])
def test_a_bad_clock_skew_stops_the_worker_before_it_starts(given: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(given)
    assert exit_info.value.code == 2 and "clock skew" in capsys.readouterr().err


def test_the_clock_skew_can_come_from_the_environment(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LDP_MAX_CLOCK_SKEW_S", "nan")
    with pytest.raises(SystemExit):
        main([])
    assert "LDP_MAX_CLOCK_SKEW_S" in capsys.readouterr().err
