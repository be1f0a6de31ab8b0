"""LDP mini-batch gradient descent over Kafka: the coordinator, the devices, the models."""

from typing import Literal, get_args

# the vector mechanisms of ldpstream.mechanisms.multidim that may perturb a gradient (here, not in `training`, so that
# `ldp train --help` names them without importing numpy and pydantic)
GradientMechanism = Literal["hm", "pm", "duchi", "laplace", "harmony"]
GRADIENT_MECHANISMS: tuple[str, ...] = get_args(GradientMechanism)

# the server's optimizer defaults (`ldpstream.sgd.server_optimizer`; here so that `ldp train --help` shows them without
# importing numpy): chosen on a validation split of Fashion-MNIST's training set (docs/explanation/sgd.md)
SERVER_LR = 0.25
SERVER_MOMENTUM = 0.5
SERVER_EMA = 0.98
