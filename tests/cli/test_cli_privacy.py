"""`ldp privacy shuffle`: its JSON contract, and bad input as one line."""

from __future__ import annotations

import json
import subprocess
import sys

from ldpstream.cli.commands import app
from tests.mechanisms.cli_support import invoke


def test_shuffle_prints_every_bound_and_the_tightest() -> None:
    code, out = invoke(app, "privacy", "shuffle", "--epsilon0", "4", "--reports", "100000", "--delta", "1e-6",
                       "--mechanism", "grr", "--domain", "2", "--json")
    result = json.loads(out)
    assert code == 0
    assert set(result["bounds"]) == {"fmt21_numerical", "fmt21_closed_form", "variation_ratio_grr"}
    assert result["epsilon"] == min(result["bounds"].values()) and result["bound"] in result["bounds"]
    composed = json.loads(invoke(app, "privacy", "shuffle", "--epsilon0", "4", "--reports", "100000", "--delta",
                                 "1e-6", "--windows", "10", "--json")[1])
    assert set(composed["bounds"]) == {"basic", "advanced", "pld"} and composed["epsilon"] > result["epsilon"]


def test_bad_parameters_are_one_line() -> None:
    answer = subprocess.run([sys.executable, "-m", "ldpstream", "privacy", "shuffle", "--epsilon0", "-1",
                             "--reports", "10", "--delta", "1e-6"], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 1 and "Traceback" not in answer.stderr and "epsilon" in answer.stderr
