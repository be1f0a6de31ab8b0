"""The TypeScript SDK's training math against Python's (`ldpstream.contract.networks`, SciPy, the server mechanisms):
per-example losses and the mean gradient of softmax and the MLP 784-64-10 within float tolerances derived from the
operation counts, ndtri within a few ulps of SciPy's, and TypeScript privunitg / projunit reports (a seeded stream
of uniforms) decoded by Python: unbiased (every coordinate within Z standard errors) with the closed-form MSE (the
mean squared error within Z of its own standard errors). Needs Node and the built SDK, no service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.special import ndtri
from ts_support import HERE, run_node

from ldpstream.contract.networks import make_network
from ldpstream.mechanisms.gradients.privunit import PrivUnitG, optimal_cap
from ldpstream.mechanisms.gradients.projunit import ProjUnit

U = 2.0**-53  # the unit roundoff of float64
Z = 4.0


def typescript(tmp: Path, job: dict[str, Any]) -> dict[str, Any]:
    src, out = tmp / "in.json", tmp / "out.json"
    src.write_text(json.dumps(job))
    run_node(HERE / "training_math.mjs", str(src), str(out))
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize(("name", "dims"), [("softmax", (784, 10)), ("mlp", (784, 64, 10)), ("mlp", (5, 4, 3, 2))])
def test_losses_and_mean_gradient_match_python(tmp_path: Path, name: str, dims: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    net = make_network(name, dims)
    theta = net.init(rng) + rng.normal(0, 0.05, net.size)  # the output layer too, so that every path is exercised
    x = rng.random((6, dims[0]))
    x[x < 0.3] = 0.0  # zero pixels, as images have: the TypeScript loops skip them
    y = rng.integers(0, dims[-1], 6)
    got = typescript(tmp_path, {"network": {"name": name, "dims": list(dims), "theta": theta.tolist(),
                                            "x": x.tolist(), "y": y.tolist()}})
    want = net.gradients(theta, x, y).sum(axis=0) / len(y)
    # Each entry is a product of sums of at most w = max width terms per layer, through L layers: both sides round
    # each term to within (w + 2) u relative of the exact value (Higham's bound for a sum, plus the product and the
    # exponential), so they differ by at most 2 L (w + 2) u times the magnitudes involved, bounded here by the
    # largest |gradient| entry and logit (1 + max).
    width, layers = max(dims), len(dims) - 1
    logits = np.abs(net.logits(theta, x)).max()
    tol = 2 * layers * (width + 2) * U * (1.0 + np.abs(want).max()) * (1.0 + logits)
    assert np.abs(np.array(got["gradient"]) - want).max() <= tol
    assert np.allclose(got["losses"], net.loss(theta, x, y), rtol=0, atol=2 * layers * (width + 2) * U * (1 + logits))


def test_ndtri_is_scipys(tmp_path: Path) -> None:
    p = np.concatenate([[1e-300, 1e-30, 1e-10, 0.5, 1 - 1e-12], np.random.default_rng(1).random(200)])
    got = np.array(typescript(tmp_path, {"ndtri": p.tolist()})["ndtri"])
    # AS241 is accurate to about 1e-16 relative; Cephes' ndtri as well: 8 ulps of the larger of |z| and 1.
    assert np.all(np.abs(got - ndtri(p)) <= 8 * 2 * U * np.maximum(1.0, np.abs(ndtri(p))))


@pytest.mark.parametrize(("name", "d", "k"), [("privunitg", 8, None), ("projunit", 12, 4)])
def test_reports_are_unbiased_with_the_closed_form_mse(tmp_path: Path, name: str, d: int, k: int | None) -> None:
    n, eps = 20_000, 4.0
    inner = k if k is not None else d
    cap = optimal_cap("gaussian", eps, inner)
    x = np.random.default_rng(3).normal(size=d)
    x /= np.linalg.norm(x)  # a unit vector: the closed forms are stated for it
    mech_spec: dict[str, Any] = {"name": name, "p": cap.p, "q": cap.q, **({} if k is None else {"k": k})}
    got = typescript(tmp_path, {"reports": {"mechanism": mech_spec, "vector": x.tolist(), "n": n, "seed": 12345}})
    value = np.array(got["reports"]["value"], dtype=np.float32)
    if name == "privunitg":
        mech: PrivUnitG | ProjUnit = PrivUnitG(dims=d, epsilon=eps)
        decoded = mech.decode({"value": value})
    else:
        mech = ProjUnit(dims=d, epsilon=eps, k=k)
        decoded = mech.decode({"seed": np.array([int(s) for s in got["reports"]["seed"]], dtype=np.uint64),
                               "value": value})
    err = decoded - x
    stderr = err.std(axis=0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(err.mean(axis=0)) <= Z * stderr + mech.bias_bound())
    sq = (err**2).sum(axis=1)
    slack = mech.mse_slack() if isinstance(mech, ProjUnit) else 0.0
    assert abs(sq.mean() - mech.unit_mse()) <= Z * sq.std(ddof=1) / np.sqrt(n) + slack
