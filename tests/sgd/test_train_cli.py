"""`ldp train --offline ... --json`: the JSON contract of the issue."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ldpstream.cli.commands import app

runner = CliRunner()
ARGS = ["train", "--offline", "--synthetic", "--devices", "20000", "--dims", "5", "--epsilon", "2", "--seed", "3"]


def test_offline_json_contract() -> None:
    for model, metric in (("logistic", "misclassification"), ("svm", "misclassification"), ("linear", "mse")):
        result = runner.invoke(app, [*ARGS, "--model", model, "--mechanism", "pm", "--json"])
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert list(out) == ["model", "metric", "private", "non_private", "iterations", "batch_size"]
        assert (out["model"], out["metric"]) == (model, metric)
        assert out["batch_size"] == 20 and out["iterations"] == 1000  # g = n / 1000; every device used once
        assert 0 <= out["non_private"] <= out["private"] + 0.05
        assert isinstance(out["private"], float) and isinstance(out["non_private"], float)


def test_offline_run_is_seeded() -> None:
    first = runner.invoke(app, [*ARGS, "--model", "logistic", "--json"]).output
    assert first == runner.invoke(app, [*ARGS, "--model", "logistic", "--json"]).output


def test_bad_input_is_a_usage_error_not_a_crash() -> None:
    for extra in (["--epsilon", "0"], ["--mechanism", "rappor"], ["--model", "ridge"], ["--census"]):
        result = runner.invoke(app, [*ARGS, "--model", "logistic", *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert runner.invoke(app, ["train", "--synthetic"]).exit_code == 2  # no --offline
