"""Multiclass models people train on images: multinomial logistic regression (softmax) and a small MLP.

Both are one family: a fully connected network with layer widths `dims` = (d, h_1, ..., h_m, C), ReLU between
layers and a softmax output trained by cross-entropy; softmax regression is the network with no hidden layer,
dims = (d, C). The parameters are one flat float64 vector theta: per layer l, W_l (in_l x out_l, row-major) then
b_l (out_l), in order. Labels are class indices 0..C-1.

Per-example gradients (what each device computes on its own example) come from one vectorised backward pass over
the n examples: with a_0 = x, z_l = a_{l-1} W_l + b_l, a_l = relu(z_l) and p = softmax(z_L),
delta_L = p - onehot(y) (the gradient of -log p_y in z_L), delta_{l-1} = (delta_l W_l^T) * [z_{l-1} > 0], and
example i's gradient is dW_l = a_{l-1,i} delta_{l,i}^T, db_l = delta_{l,i}. No deep-learning framework is needed.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np


class TrainingError(ValueError):
    """Invalid input to training: bad shapes, labels, job parameters or gradients."""


MAX_LAYERS = 8
MAX_WIDTH = 1 << 20
MAX_PARAMS = 1 << 26  # 64 Mi parameters: 512 MiB in float64, far above any model a device trains


class Network:
    """A fully connected ReLU network with a softmax output (module docstring); `dims` = (d, h_1, ..., C).

    Examples
    --------
    >>> net = make_network("mlp", (4, 3, 2))
    >>> net.size  # 4*3 + 3 + 3*2 + 2
    23
    >>> theta = net.init(np.random.default_rng(0))
    >>> net.gradients(theta, np.ones((5, 4)), np.array([0, 1, 1, 0, 1])).shape
    (5, 23)
    """

    name: ClassVar[str] = "mlp"

    def __init__(self, dims: tuple[int, ...]) -> None:
        dims = tuple(int(k) for k in dims)
        check_dims(self.name, dims)
        self.dims = dims
        self.shapes = list(zip(dims[:-1], dims[1:], strict=True))
        self.size = sum(i * o + o for i, o in self.shapes)

    @property
    def features(self) -> int:
        return self.dims[0]

    @property
    def classes(self) -> int:
        return self.dims[-1]

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """Version 0: biases 0; hidden layers' weights He-uniform (U(+-sqrt(6 / in))), the output layer's 0."""
        theta = np.zeros(self.size)
        for (w, _), (fan_in, fan_out) in zip(self._offsets()[:-1], self.shapes[:-1], strict=True):
            bound = np.sqrt(6.0 / fan_in)
            theta[w : w + fan_in * fan_out] = rng.uniform(-bound, bound, fan_in * fan_out)
        return theta

    def _offsets(self) -> list[tuple[int, int]]:
        """Per layer, where W_l and b_l start in theta."""
        out, at = [], 0
        for i, o in self.shapes:
            out.append((at, at + i * o))
            at += i * o + o
        return out

    def layers(self, theta: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(W_l, b_l) per layer, as views of theta."""
        theta = self._checked_theta(theta)
        return [(theta[w : w + i * o].reshape(i, o), theta[b : b + o])
                for (w, b), (i, o) in zip(self._offsets(), self.shapes, strict=True)]

    def _forward(self, theta: np.ndarray, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """(activations a_0..a_{L-1}, pre-activations z_1..z_{L-1}, logits z_L)."""
        layers = self.layers(theta)
        acts, pres = [x], []
        for w, b in layers[:-1]:
            z = acts[-1] @ w + b
            pres.append(z)
            acts.append(np.maximum(z, 0.0))
        w, b = layers[-1]
        return acts, pres, acts[-1] @ w + b

    def logits(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """z_L per example, shape (n, C)."""
        return self._forward(theta, self._checked_x(x))[2]

    def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example cross-entropy -log softmax(z_L)_y, shape (n,)."""
        x, y = self._checked_xy(x, y)
        z = self.logits(theta, x)
        return _logsumexp(z) - z[np.arange(len(y)), y]

    def gradients(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example gradient of the cross-entropy in theta, shape (n, size) (module docstring)."""
        x, y = self._checked_xy(x, y)
        n = len(y)
        acts, pres, z = self._forward(theta, x)
        delta = np.exp(z - _logsumexp(z)[:, None])  # softmax
        delta[np.arange(n), y] -= 1.0
        out = np.empty((n, self.size))
        layers = self.layers(theta)
        for layer in range(len(layers) - 1, -1, -1):
            (w_at, b_at), (fan_in, fan_out) = self._offsets()[layer], self.shapes[layer]
            np.multiply(acts[layer][:, :, None], delta[:, None, :], out=out[:, w_at:b_at].reshape(n, fan_in, fan_out))
            out[:, b_at : b_at + fan_out] = delta
            if layer:
                delta = (delta @ layers[layer][0].T) * (pres[layer - 1] > 0.0)
        return out

    def predict(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The most likely class per example."""
        return np.argmax(self.logits(theta, x), axis=1)

    def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """The fraction of examples whose predicted class is their label."""
        x, y = self._checked_xy(x, y)
        return float(np.mean(self.predict(theta, x) == y))

    def _checked_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.size,):
            raise TrainingError(f"{self.name} {self.dims} has {self.size} parameters, got shape {theta.shape}")
        return theta

    def _checked_x(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.features:
            raise TrainingError(f"features must have shape (n, {self.features}), got {x.shape}")
        return x

    def _checked_xy(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = self._checked_x(x)
        y = np.asarray(y)
        if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
            raise TrainingError(f"labels must be {x.shape[0]} class indices, got {y.dtype} {y.shape}")
        if len(y) and (y.min() < 0 or y.max() >= self.classes):
            raise TrainingError(f"labels must lie in 0..{self.classes - 1}")
        return x, y.astype(np.intp)


class Softmax(Network):
    """Multinomial logistic regression: the network with no hidden layer, dims = (d, C)."""

    name = "softmax"


def _logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


def check_dims(name: str, dims: tuple[int, ...]) -> None:
    """TrainingError unless `dims` is a valid architecture for network `name` (bounded before any allocation)."""
    if name not in NETWORKS:
        raise TrainingError(f"unknown network {name!r}; known: {sorted(NETWORKS)}")
    layers = len(dims) - 1
    if not (layers == 1 if name == "softmax" else 2 <= layers <= MAX_LAYERS):
        raise TrainingError(f"{name} takes {'2 widths (d, C)' if name == 'softmax' else '3 to 9 widths'}, got {dims}")
    if any(not 1 <= k <= MAX_WIDTH for k in dims) or dims[-1] < 2:
        raise TrainingError(f"widths must lie in 1..{MAX_WIDTH} with at least 2 classes, got {dims}")
    if sum(i * o + o for i, o in zip(dims[:-1], dims[1:], strict=True)) > MAX_PARAMS:
        raise TrainingError(f"{name} {dims} has more than {MAX_PARAMS} parameters")


NETWORKS: dict[str, type[Network]] = {"softmax": Softmax, "mlp": Network}
DEFAULT_HIDDEN = (64,)  # the MLP 784-64-10 of the Fashion-MNIST benchmark


def make_network(name: str, dims: tuple[int, ...]) -> Network:
    """The network `name` ('softmax' or 'mlp') with layer widths `dims` = (d, [hidden...,] C)."""
    check_dims(name, tuple(dims))
    return NETWORKS[name](tuple(dims))
