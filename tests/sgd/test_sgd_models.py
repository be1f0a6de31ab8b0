"""The three models of 000 Sec. V: gradients against finite differences, losses, metrics, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.sgd.models import MODELS, TrainingError, make_model

LAM = 0.05  # larger than the default so that the regularisation term is visible in the finite differences


def _batch(name: str, n: int = 40, d: int = 6, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, d))
    beta = rng.normal(0, 1, d)
    y = rng.uniform(-1, 1, n) if name == "linear" else rng.choice([-1.0, 1.0], n)
    return beta, x, y


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradient_matches_central_finite_differences(name: str) -> None:
    model = make_model(name, LAM)
    beta, x, y = _batch(name)
    if name == "svm":  # the hinge has a kink at y x^T beta = 1: keep examples well away from it
        keep = np.abs(1 - y * (x @ beta)) > 1e-3
        x, y = x[keep], y[keep]

    def regularised(b: np.ndarray) -> np.ndarray:  # ell'(b; x_i, y_i) per example
        return model.loss(b, x, y) + 0.5 * LAM * float(b @ b)

    h = 1e-6
    steps = np.eye(len(beta)) * h
    numeric = np.stack([(regularised(beta + e) - regularised(beta - e)) / (2 * h) for e in steps], axis=1)
    np.testing.assert_allclose(model.gradients(beta, x, y), numeric, rtol=1e-6, atol=1e-7)


def test_closed_forms_at_a_hand_computed_point() -> None:
    x = np.array([[0.5, -1.0]])
    beta = np.array([2.0, 1.0])  # x^T beta = 0
    y = np.array([1.0])
    np.testing.assert_allclose(make_model("linear", 0).gradients(beta, x, y), [[-1.0, 2.0]])  # 2 (0 - 1) x
    np.testing.assert_allclose(make_model("logistic", 0).gradients(beta, x, y), [[-0.25, 0.5]])  # -y x / 2
    np.testing.assert_allclose(make_model("svm", 0).gradients(beta, x, y), [[-0.5, 1.0]])  # -y x
    np.testing.assert_allclose(make_model("svm", 0.5).gradients(beta, x, y), [[0.5, 1.5]])  # + lambda beta


def test_logistic_loss_is_finite_for_huge_margins() -> None:
    model = make_model("logistic")
    x = np.array([[1.0], [1.0]])
    y = np.array([1.0, -1.0])
    loss = model.loss(np.array([1e4]), x, y)
    np.testing.assert_allclose(loss, [0.0, 1e4])
    assert np.isfinite(model.gradients(np.array([1e4]), x, y)).all()


def test_metrics() -> None:
    beta = np.array([1.0])
    x = np.array([[0.5], [-0.5], [0.2], [0.0]])
    assert make_model("logistic").metric(beta, x, np.array([1.0, 1.0, -1.0, 1.0])) == 0.5  # 0 predicts +1
    assert make_model("svm").metric(beta, x, np.array([1.0, -1.0, 1.0, 1.0])) == 0.0
    assert make_model("linear").metric(beta, x, np.array([0.5, -0.5, 0.0, 0.4])) == pytest.approx((0.04 + 0.16) / 4)
    assert make_model("linear").objective(beta, x, np.array([0.5, -0.5, 0.0, 0.4])) == pytest.approx(0.05 + 0.5 * 1e-4)


@pytest.mark.parametrize(
    ("beta", "x", "y"),
    [
        (np.zeros(2), np.zeros((3, 3)), np.ones(3)),  # d disagrees
        (np.zeros(2), np.zeros((3, 2)), np.ones(4)),  # n disagrees
        (np.zeros(2), np.zeros(2), np.ones(1)),  # x not 2-D
        (np.zeros(2), np.full((1, 2), np.nan), np.ones(1)),  # NaN
    ],
)
def test_bad_shapes_and_values_raise(beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    with pytest.raises(TrainingError):
        make_model("logistic").gradients(beta, x, y)


def test_label_checks_and_unknown_names() -> None:
    with pytest.raises(TrainingError, match="-1 or 1"):
        make_model("svm").check_labels(np.array([1.0, 0.0]))
    with pytest.raises(TrainingError, match=r"\[-1, 1\]"):
        make_model("linear").check_labels(np.array([1.5]))
    make_model("linear").check_labels(np.array([-1.0, 0.3, 1.0]))
    with pytest.raises(TrainingError, match="unknown model"):
        make_model("ridge")
    with pytest.raises(TrainingError, match="lambda"):
        make_model("linear", -1.0)
