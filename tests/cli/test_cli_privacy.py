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


def test_audit_of_shuffled_batches_prints_the_claims_and_the_lower_bound() -> None:
    code, out = invoke(app, "audit", "-m", "grr", "-e", "4", "-k", "2", "--shuffled-batch", "20000", "--windows",
                       "24", "--delta", "1e-8", "-n", "100000", "--json")
    result = json.loads(out)
    assert code == 0 and result["within_claim"]
    assert result["epsilon_lower_bound"] <= result["exact_epsilon"] <= result["claimed_epsilon"]
    assert result["composed_epsilon"] > result["claimed_epsilon"] and result["composed_bound"] == "pld"
    code, _ = invoke(app, "audit", "-m", "oue", "-e", "4", "-k", "2", "--shuffled-batch", "20000")
    assert code == 2  # only grr: said in one line
