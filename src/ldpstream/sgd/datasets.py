"""Data for LDP SGD experiments: synthetic sets with a known model, and the UCI Adult census data.

Every dataset has features in [-1, 1]^d and labels in [-1, 1] (regression) or {-1, 1} (classification),
as 000 Sec. V assumes. Adult is read from the copy of the UCI Adult training file that the `xai` package
ships inside its wheel (install with `pip install 'ldpstream[data]'`); nothing is downloaded at run time.
"""

from __future__ import annotations

import csv
import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import expit

from ldpstream.sgd.models import MODELS, TrainingError

LINEAR_SIGNAL_STD = 0.3  # std of x^T beta* in the synthetic linear set
LINEAR_NOISE_STD = 0.1  # std of the Gaussian label noise in the synthetic linear set
LOGIT_STD = 3.0  # std of the logit x^T beta* in the synthetic classification sets


class DatasetUnavailable(TrainingError):
    """The package that ships a dataset is not installed."""


@dataclass(frozen=True)
class Dataset:
    """Rows of (x, y): x (n, d) in [-1, 1]^d, y (n,); `true_beta` is the generating model of a synthetic set."""

    name: str
    x: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    true_beta: np.ndarray | None = None

    @property
    def dims(self) -> int:
        return int(self.x.shape[1])

    def split(self, test_rows: int, seed: int = 0) -> tuple[Dataset, Dataset]:
        """A random (train, held-out test) split with `test_rows` test rows."""
        if not 0 < test_rows < len(self.y):
            raise TrainingError(f"test_rows must be in (0, {len(self.y)}), got {test_rows}")
        order = np.random.default_rng(seed).permutation(len(self.y))
        return self._rows(order[test_rows:]), self._rows(order[:test_rows])

    def folds(self, k: int, seed: int = 0) -> list[tuple[Dataset, Dataset]]:
        """k-fold cross-validation: k (train, test) pairs over one random permutation of the rows."""
        if not 2 <= k <= len(self.y):
            raise TrainingError(f"need 2 <= k <= {len(self.y)} folds, got {k}")
        parts = np.array_split(np.random.default_rng(seed).permutation(len(self.y)), k)
        return [(self._rows(np.concatenate(parts[:i] + parts[i + 1 :])), self._rows(parts[i])) for i in range(k)]

    def _rows(self, index: np.ndarray) -> Dataset:
        return Dataset(self.name, self.x[index], self.y[index], self.feature_names, self.true_beta)


def synthetic(model: str, n: int, dims: int, seed: int = 0) -> Dataset:
    """n rows with x uniform on [-1, 1]^d and labels from a known beta* (a random direction).

    Linear: y = x^T beta* + N(0, 0.1^2), clipped to [-1, 1], with std(x^T beta*) = 0.3.
    Logistic and SVM: y = 1 with probability sigmoid(x^T beta*), else -1, with std(x^T beta*) = 3.
    Since E[x x^T] = I/3 for uniform x, std(x^T beta*) = ||beta*|| / sqrt(3).
    """
    if model not in MODELS:
        raise TrainingError(f"unknown model {model!r}; known: {sorted(MODELS)}")
    if n < 1 or dims < 1:
        raise TrainingError(f"need n >= 1 and dims >= 1, got n={n}, dims={dims}")
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(dims)
    direction /= np.linalg.norm(direction)
    x = rng.uniform(-1.0, 1.0, size=(n, dims))
    if model == "linear":
        beta = direction * LINEAR_SIGNAL_STD * np.sqrt(3.0)
        y = np.clip(x @ beta + rng.normal(0.0, LINEAR_NOISE_STD, n), -1.0, 1.0)
    else:
        beta = direction * LOGIT_STD * np.sqrt(3.0)
        y = np.where(rng.random(n) < expit(x @ beta), 1.0, -1.0)
    names = tuple(f"x{j}" for j in range(dims))
    return Dataset(f"synthetic-{model}-d{dims}", x, y, names, beta)


def encode_table(
    rows: Sequence[Sequence[str]], header: Sequence[str], numeric: Sequence[str], categorical: Sequence[str]
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Features as in 000 Sec. VI-B: each numeric column min-max normalised to [-1, 1]; each categorical column
    with k values (sorted) becomes k - 1 binary {0, 1} columns, the l-th value a 1 on the l-th column, the k-th
    value all zeros."""
    position = {name: j for j, name in enumerate(header)}
    missing = [c for c in (*numeric, *categorical) if c not in position]
    if missing:
        raise TrainingError(f"columns {missing} not in the header {list(header)}")
    blocks: list[np.ndarray] = []
    names: list[str] = []
    for col in numeric:
        try:
            values = np.array([float(r[position[col]]) for r in rows])
        except ValueError as exc:
            raise TrainingError(f"numeric column {col!r}: {exc}") from exc
        blocks.append(normalise(values)[:, None])
        names.append(col)
    for col in categorical:
        levels, codes = np.unique(np.array([r[position[col]].strip() for r in rows]), return_inverse=True)
        blocks.append((codes[:, None] == np.arange(len(levels) - 1)[None, :]).astype(np.float64))
        names.extend(f"{col}={level}" for level in levels[:-1])
    return np.hstack(blocks), tuple(names)


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max map of a numeric attribute onto [-1, 1] (000 Sec. VI: "we normalize the domain of each numerical
    attribute into [-1, 1]"); a constant attribute maps to 0."""
    low, high = float(values.min()), float(values.max())
    if high == low:
        return np.zeros_like(values, dtype=np.float64)
    return 2.0 * (values - low) / (high - low) - 1.0


ADULT_PACKAGE = "xai"
ADULT_FILE = "xai/data/census.csv"  # the UCI Adult training file (32,561 rows, fnlwgt and native-country left out)
ADULT_LABEL = "loan"  # income: '>50K' or '<=50K'
ADULT_NUMERIC = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")
ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship", "ethnicity", "gender")
ADULT_REGRESSION_TARGET = "age"


def adult_path() -> Path:
    """Where the installed `xai` wheel keeps the Adult file (found without importing the package)."""
    try:
        path = Path(str(importlib.metadata.distribution(ADULT_PACKAGE).locate_file(ADULT_FILE)))
    except importlib.metadata.PackageNotFoundError as exc:
        message = "the Adult census data ships in the 'xai' package: pip install 'ldpstream[data]'"
        raise DatasetUnavailable(message) from exc
    if not path.is_file():
        raise DatasetUnavailable(f"the installed {ADULT_PACKAGE!r} package has no {ADULT_FILE}")
    return path


def adult(model: str, path: Path | None = None) -> Dataset:
    """UCI Adult as in 000 Sec. VI-B: for logistic and SVM, y = 1 if income > 50K else -1, from all other
    attributes; for linear regression (Adult has no numeric income) y = age normalised to [-1, 1]."""
    if model not in MODELS:
        raise TrainingError(f"unknown model {model!r}; known: {sorted(MODELS)}")
    with open(path or adult_path(), newline="") as handle:
        header, *rows = list(csv.reader(handle))
    header = [h.strip() for h in header]
    if model == "linear":
        numeric = tuple(c for c in ADULT_NUMERIC if c != ADULT_REGRESSION_TARGET)
        x, names = encode_table(rows, header, numeric, (*ADULT_CATEGORICAL, ADULT_LABEL))
        target, _ = encode_table(rows, header, (ADULT_REGRESSION_TARGET,), ())
        y = target[:, 0]
    else:
        x, names = encode_table(rows, header, ADULT_NUMERIC, ADULT_CATEGORICAL)
        label = np.array([r[header.index(ADULT_LABEL)].strip() for r in rows])
        y = np.where(label == ">50K", 1.0, -1.0)
    return Dataset(f"adult-{model}", x, y, names)
