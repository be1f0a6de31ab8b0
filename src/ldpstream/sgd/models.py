"""The three empirical-risk models of 000 Sec. V: linear regression, logistic regression and SVM.

Each model gives, vectorised over a batch of n examples (x: (n, d), y: (n,)), the per-example loss
ell(beta; x_i, y_i), the per-example gradient of the regularised loss
ell'(beta; x_i, y_i) = ell(beta; x_i, y_i) + lambda/2 ||beta||_2^2 (000 Sec. V, the definition of ell'),
a prediction and the evaluation metric used in 000 Sec. VI-B (MSE for linear regression, misclassification
rate for logistic regression and SVM). Labels are in [-1, 1] for regression and in {-1, 1} for classification.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ldpstream.contract.networks import TrainingError

DEFAULT_LAMBDA = 1e-4  # 000 Sec. VI-B: "we set the regularization factor lambda = 10^-4"


class Model(ABC):
    """A regularised empirical-risk model with parameter vector beta (000 Sec. V)."""

    name: ClassVar[str]
    metric_name: ClassVar[str]

    def __init__(self, lam: float = DEFAULT_LAMBDA) -> None:
        if not np.isfinite(lam) or lam < 0:
            raise TrainingError(f"regularisation lambda must be finite and >= 0, got {lam!r}")
        self.lam = float(lam)

    @abstractmethod
    def _loss_from_margin(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """ell as a function of z = x^T beta and y, per example."""

    @abstractmethod
    def _dloss_dz(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """d ell / d z per example (a subgradient where ell is not differentiable)."""

    @abstractmethod
    def predict(self, beta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Predicted label (classification) or value (regression) per example."""

    @abstractmethod
    def metric(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """The evaluation metric of 000 Sec. VI-B on (x, y): lower is better."""

    @abstractmethod
    def check_labels(self, y: np.ndarray) -> None:
        """Raise TrainingError unless y is a valid label vector for this model."""

    def loss(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example data loss ell(beta; x_i, y_i) (000 Sec. V, items 1-3), shape (n,)."""
        beta, x, y = self._checked(beta, x, y)
        return self._loss_from_margin(x @ beta, y)

    def objective(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """The regularised empirical risk (1/n) sum ell + lambda/2 ||beta||^2 that SGD minimises (000 Sec. V)."""
        return float(self.loss(beta, x, y).mean() + 0.5 * self.lam * float(beta @ beta))

    def gradients(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example gradient of ell'(beta; x_i, y_i) = ell + lambda/2 ||beta||^2, shape (n, d).

        By the chain rule grad ell = (d ell / d z) x_i with z = x_i^T beta, and grad lambda/2 ||beta||^2 = lambda beta.
        """
        beta, x, y = self._checked(beta, x, y)
        return self._dloss_dz(x @ beta, y)[:, None] * x + self.lam * beta[None, :]

    @staticmethod
    def _checked(beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        beta = np.asarray(beta, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if beta.ndim != 1 or x.ndim != 2 or y.ndim != 1:
            raise TrainingError(f"expected beta (d,), x (n, d), y (n,); got {beta.shape}, {x.shape}, {y.shape}")
        if x.shape != (y.shape[0], beta.shape[0]):
            raise TrainingError(f"shapes do not agree: beta {beta.shape}, x {x.shape}, y {y.shape}")
        if not (np.isfinite(beta).all() and np.isfinite(x).all() and np.isfinite(y).all()):
            raise TrainingError("beta, x and y must be finite")
        return beta, x, y


class LinearRegression(Model):
    """Squared loss ell = (x^T beta - y)^2 (000 Sec. V, item 1); metric: mean squared error."""

    name = "linear"
    metric_name = "mse"

    def _loss_from_margin(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (z - y) ** 2

    def _dloss_dz(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 2.0 * (z - y)

    def predict(self, beta: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) @ np.asarray(beta, dtype=np.float64)

    def metric(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return float(self.loss(beta, x, y).mean())

    def check_labels(self, y: np.ndarray) -> None:
        y = np.asarray(y, dtype=np.float64)
        if not (np.isfinite(y).all() and (np.abs(y) <= 1.0).all()):
            raise TrainingError("linear regression labels must lie in [-1, 1] (000 Sec. V)")


class _Classifier(Model):
    """Shared prediction, metric and label check of the two classifiers (labels in {-1, 1})."""

    metric_name = "misclassification"

    def predict(self, beta: np.ndarray, x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, dtype=np.float64) @ np.asarray(beta, dtype=np.float64)
        return np.where(z >= 0.0, 1.0, -1.0)

    def metric(self, beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        beta, x, y = self._checked(beta, x, y)
        return float(np.mean(self.predict(beta, x) != y))

    def check_labels(self, y: np.ndarray) -> None:
        y = np.asarray(y, dtype=np.float64)
        if not ((y == 1.0) | (y == -1.0)).all():
            raise TrainingError(f"{self.name} labels must be -1 or 1 (000 Sec. V)")


class LogisticRegression(_Classifier):
    """Logistic loss ell = log(1 + exp(-y x^T beta)) (000 Sec. V, item 2)."""

    name = "logistic"

    def _loss_from_margin(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        m = -y * z  # log(1 + e^m) computed without overflow: max(m, 0) + log1p(e^-|m|)
        return np.maximum(m, 0.0) + np.log1p(np.exp(-np.abs(m)))

    def _dloss_dz(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        from scipy.special import expit  # SciPy loaded where a model is trained, not by the CLI's help

        return -y * expit(-y * z)  # d/dz log(1 + e^{-yz}) = -y / (1 + e^{yz})


class SVM(_Classifier):
    """Hinge loss ell = max(0, 1 - y x^T beta) (000 Sec. V, item 3); the subgradient 0 is taken at the kink."""

    name = "svm"

    def _loss_from_margin(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, 1.0 - y * z)

    def _dloss_dz(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(y * z < 1.0, -y, 0.0)


MODELS: dict[str, type[Model]] = {cls.name: cls for cls in (LinearRegression, LogisticRegression, SVM)}


def make_model(name: str, lam: float = DEFAULT_LAMBDA) -> Model:
    """The model called `name` ('linear', 'logistic' or 'svm') with regularisation `lam`.

    Examples
    --------
    >>> model = make_model("logistic")
    >>> beta = np.array([1.0, -1.0]); x = np.array([[0.5, -0.5], [-1.0, 0.0]]); y = np.array([1.0, 1.0])
    >>> model.metric(beta, x, y)
    0.5
    >>> model.gradients(beta, x, y).shape
    (2, 2)
    """
    if name not in MODELS:
        raise TrainingError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    return MODELS[name](lam)
