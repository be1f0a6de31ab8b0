"""Synthetic sets, the 000 Sec. VI-B encoding, folds, and the Adult data shipped by the `xai` wheel."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ldpstream.sgd.datasets import adult, encode_table, normalise, synthetic
from ldpstream.sgd.models import TrainingError


@pytest.mark.parametrize("model", ["linear", "logistic", "svm"])
def test_synthetic_sets_are_in_range_and_seeded(model: str) -> None:
    data = synthetic(model, 2000, 12, seed=3)
    assert data.x.shape == (2000, 12) and data.true_beta is not None
    assert np.abs(data.x).max() <= 1.0 and np.abs(data.y).max() <= 1.0
    if model != "linear":
        assert set(np.unique(data.y)) == {-1.0, 1.0}
    np.testing.assert_array_equal(data.y, synthetic(model, 2000, 12, seed=3).y)
    with pytest.raises(TrainingError):
        synthetic("ridge", 10, 2)


def test_encoding_follows_000_section_vi_b() -> None:
    header = ["colour", "size", "label"]
    rows = [["red", "10", "a"], ["blue", "30", "b"], [" green", "20", "a"], ["red", "10", "b"]]
    x, names = encode_table(rows, header, numeric=["size"], categorical=["colour"])
    assert names == ("size", "colour=blue", "colour=green")  # k = 3 values -> 2 binary columns, 'red' all zeros
    np.testing.assert_array_equal(x, [[-1, 0, 0], [1, 1, 0], [0, 0, 1], [-1, 0, 0]])
    np.testing.assert_array_equal(normalise(np.array([5.0, 5.0])), [0.0, 0.0])
    with pytest.raises(TrainingError, match="not in the header"):
        encode_table(rows, header, numeric=["weight"], categorical=[])
    with pytest.raises(TrainingError, match="numeric column"):
        encode_table(rows, header, numeric=["colour"], categorical=[])


def test_folds_partition_the_rows() -> None:
    data = synthetic("linear", 103, 2, seed=0)
    folds = data.folds(10, seed=1)
    assert len(folds) == 10
    tests = np.concatenate([test.y for _, test in folds])
    np.testing.assert_array_equal(np.sort(tests), np.sort(data.y))
    assert all(len(train.y) + len(test.y) == 103 for train, test in folds)
    train, test = data.split(20)
    assert (len(train.y), len(test.y)) == (83, 20)


def test_adult_loader_on_a_small_file_in_the_shipped_format(tmp_path: Path) -> None:
    path = tmp_path / "census.csv"
    header = [
        "",
        "age",
        "workclass",
        "education",
        "education-num",
        "marital-status",
        "occupation",
        "relationship",
        "ethnicity",
        "gender",
        "capital-gain",
        "capital-loss",
        "hours-per-week",
        "loan",
    ]
    rows = [
        [
            "0",
            "39",
            " State-gov",
            " Bachelors",
            "13",
            " Never-married",
            " Adm-clerical",
            " Not-in-family",
            " White",
            " Male",
            "2174",
            "0",
            "40",
            " <=50K",
        ],
        [
            "1",
            "50",
            " Private",
            " HS-grad",
            "9",
            " Divorced",
            " ?",
            " Husband",
            " Black",
            " Female",
            "0",
            "10",
            "13",
            " >50K",
        ],
    ]
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    data = adult("logistic", path)
    np.testing.assert_array_equal(data.y, [-1.0, 1.0])
    assert data.x.shape == (2, 5 + 7)  # 5 numeric columns, 7 categorical columns with 2 values each
    regression = adult("linear", path)
    np.testing.assert_array_equal(regression.y, [-1.0, 1.0])  # age 39 -> -1, 50 -> 1
    assert "age" not in regression.feature_names and "loan=<=50K" in regression.feature_names


@pytest.mark.skipif(importlib.util.find_spec("xai") is None, reason="needs the optional 'data' extra (xai)")
def test_the_shipped_adult_file() -> None:
    data = adult("svm")
    assert data.x.shape == (32561, 58)
    assert np.abs(data.x).max() <= 1.0
    assert np.mean(data.y == 1.0) == pytest.approx(7841 / 32561)  # UCI Adult training file: 7841 earn > 50K
