"""Job files of training jobs devices join (`ldp train publish JOB.yaml`): the `job:` section, completed, and the
coordinator's `evaluation:` section.

The `job:` section holds the fields of protocol section 13.1; two may be left out and are derived here: `parameters`
(the architecture's count) and the mechanism's cap parameters `p`, `q` (PrivUnitG's optimal ones at the job's
epsilon and dimension, `ldpstream.mechanisms.gradients.privunit.optimal_cap`; projunit's at its k). `evaluation:`
(`dataset`: `fashion-mnist`, `rows`: how many of its test images) is the coordinator's, never a device's: it is kept
in Redis beside the job, not in the signed spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ldpstream.contract.networks import make_network
from ldpstream.contract.training import JobSpec, TrainingWireError, job_from_mapping
from ldpstream.mechanisms.gradients.privunit import optimal_cap
from ldpstream.sgd.federated import evaluate
from ldpstream.sgd.images import fashion_mnist
from ldpstream.sgd.jobrun import Evaluator
from ldpstream.sgd.models import TrainingError

EVALUATION_DATASETS = ("fashion-mnist",)


def complete_job(section: Any) -> JobSpec:
    """The job spec of a job file's `job:` section, with `parameters` and the cap's `p`, `q` derived when absent;
    TrainingWireError with the reason if it is not a valid job."""
    if not isinstance(section, dict):
        raise TrainingWireError("a job file's job: section is a mapping", "malformed_job")
    job = dict(section)
    model = job.get("model") or {}
    try:
        net = make_network(str(model.get("architecture")), tuple(model.get("dims") or ()))
    except (TypeError, ValueError) as exc:
        raise TrainingWireError(f"job.model: {exc}", "malformed_job") from None
    job.setdefault("parameters", net.size)
    mechanism = dict(job.get("mechanism") or {})
    if "p" not in mechanism or "q" not in mechanism:
        k = mechanism.get("k")
        dims = net.size if k is None else min(int(k), 1 << (net.size - 1).bit_length())
        cap = optimal_cap("gaussian", float(job.get("epsilon", 0.0)), dims)
        mechanism.setdefault("p", cap.p)
        mechanism.setdefault("q", cap.q)
    job["mechanism"] = mechanism
    return job_from_mapping(job)


def load_job_yaml(path: Path) -> tuple[JobSpec, dict[str, Any] | None]:
    """(the job spec, the evaluation section or None) of a job file; ValueError with the reason otherwise."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    if not isinstance(raw, dict) or "job" not in raw or set(raw) - {"job", "evaluation"}:
        raise ValueError(f"{path}: a job file has a job: section and, optionally, an evaluation: section")
    evaluation = raw.get("evaluation")
    if evaluation is not None and (not isinstance(evaluation, dict) or evaluation.get("dataset")
                                   not in EVALUATION_DATASETS or not isinstance(evaluation.get("rows", 1), int)):
        raise ValueError(f"{path}: evaluation: {{dataset: one of {EVALUATION_DATASETS}, rows: N}}")
    try:
        return complete_job(raw["job"]), evaluation
    except TrainingWireError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def held_out(spec: JobSpec, evaluation: dict[str, Any]) -> Evaluator:
    """The coordinator's evaluation of a version's parameters on the held-out rows the section names: accuracy and
    mean cross-entropy with their standard errors, and the number of rows they were measured on."""
    test = fashion_mnist("test")
    rows = int(evaluation.get("rows", len(test.y)))
    test = test.head(max(1, min(rows, len(test.y))))
    net = make_network(spec.model.architecture, tuple(spec.model.dims))
    if test.dims != net.features or test.classes != net.classes:
        raise TrainingError(f"{evaluation['dataset']} has {test.dims} features and {test.classes} classes; the job's "
                            f"model takes {net.features} and {net.classes}")

    def run(theta: np.ndarray) -> dict[str, float]:
        result = evaluate(net, theta, test)
        return {"accuracy": result.accuracy, "accuracy_stderr": result.accuracy_stderr, "loss": result.loss,
                "loss_stderr": result.loss_stderr, "rows": len(test.y)}

    return run
