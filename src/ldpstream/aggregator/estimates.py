"""Estimates on read: a window's statistics from the store through the collection's collector, as JSON.

The raw unbiased estimate is always there; post-processing (clip a mean into its range, make frequencies
consistent by Norm-Sub or least-squares projection) is biased and is added beside it, never instead of it.

A numeric attribute reported by a distribution mechanism (`mechanism: sw` in its spec) also has its "distribution"
(`ldpstream.mechanisms.distribution.base.Distribution.to_dict`, on the attribute's own scale), a stable contract:

    {"method": "sw-ems", "reports": n_j, "grid": [d + 1 bin edges], "density": [d, per unit of the attribute],
     "probabilities": [d bin masses], "cdf": [at the d + 1 edges], "cdf_stderr": [d + 1],
     "quantiles": {"0.5": {"estimate", "stderr"}, ... at DEFAULT_QUANTILES}, "mean": {"estimate", "stderr"},
     "stderr_method": "...", "details": {...}}

or null while no device has reported the attribute. Non-finite numbers are null.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import numpy as np

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import DEFAULT_POLICY, WindowDefence, window_defence
from ldpstream.aggregator.store import ALL_TIME, StatsStore
from ldpstream.contract.shuffled import report_path
from ldpstream.contract.spec import (
    Attribute,
    CategoricalAttribute,
    KeyValueAttribute,
    SpecError,
    StringAttribute,
    window_seconds,
)
from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.distribution.base import DEFAULT_QUANTILES, Distribution, DistributionMechanism
from ldpstream.mechanisms.poisoning.base import SUSPECTED
from ldpstream.mechanisms.poisoning.numeric import DENSITY
from ldpstream.mechanisms.postprocess import clip_mean, norm_sub, project_simplex

PostProcess = Literal["none", "clip", "norm_sub", "project"]
POSTPROCESS = ("none", "clip", "norm_sub", "project")


def resolve_window(store: StatsStore, plan: Plan, window: str) -> tuple[str, int]:
    """(window, start_ms) for 'all', '1h' (its newest window with data) or '1h:<start_ms>'."""
    name, _, start = window.partition(":")
    if name == ALL_TIME:
        return ALL_TIME, 0
    if name not in plan.spec.windows:
        raise SpecError(f"{plan.spec.key} has no window {name!r}; windows: {', '.join([*plan.spec.windows, 'all'])}")
    if start:
        return name, int(start)
    starts = [s for v, w, s in store.windows(plan.spec.name) if v == plan.spec.version and w == name]
    return name, max(starts) if starts else 0


def query_labels(workload: str, values: list[str], count: int) -> list[str]:
    """Names of a workload's queries over a categorical attribute's values (q0, q1, ... where none is natural)."""
    if workload == "histogram" and count == len(values):
        return list(values)
    if workload == "prefix" and count == len(values):
        return [f"<= {v}" for v in values]
    if workload == "all_range" and count == len(values) * (len(values) + 1) // 2:
        return [f"[{values[i]}, {values[j]}]" for i in range(len(values)) for j in range(i, len(values))]
    return [f"q{i}" for i in range(count)]


def _float(x: Any) -> float | None:
    v = float(x)
    return v if np.isfinite(v) else None


def collection_estimates(store: StatsStore, plan: Plan, window: str = ALL_TIME,
                         postprocess: PostProcess = "none") -> dict[str, Any]:
    """{"collection", "version", "window", "window_start_ms", "reports", "attributes": {...}} for one window.

    Per attribute: {"mean", "stderr"} (numeric; with a distribution mechanism also "distribution", module
    docstring), {"frequencies": {value: {"estimate", "stderr"}}} (categorical; a
    string attribute's are its decoded heavy hitters, largest first, with "heavy_hitters": top), {"workload",
    "answers": {query: {"estimate", "stderr"}}} (a factorization attribute's workload answers), or {"frequencies":
    {key: ...}, "means": {key: {"estimate", "stderr"}}} (keyvalue: how many devices hold each key, and the mean of
    their values; a mean is null where no holder is estimated).

    "poisoning": the window's suspected poisoning and its defended estimates (`poisoning_summary`); the estimates
    above are the live ones, from every report counted.
    """
    if postprocess not in POSTPROCESS:
        raise ValueError(f"postprocess must be one of {POSTPROCESS}, got {postprocess!r}")
    name, start = resolve_window(store, plan, window)
    stats = store.read_window(plan.spec.name, plan.spec.version, name, start, plan.sizes)
    distributions = (plan.distributions(stats) if any(isinstance(m, DistributionMechanism) for m in plan.mechanisms)
                     else {})
    attributes = attribute_entries(plan, plan.estimate(stats), postprocess, distributions)
    result = {"collection": plan.spec.name, "version": plan.spec.version,
              "window": name if name == ALL_TIME else f"{name}:{start}", "window_start_ms": start,
              "reports": int(stats.devices), "attributes": attributes}
    if report_path(plan.spec).shuffled:
        result["shuffle"] = shuffle_summary(store, plan, name, start)
    result["poisoning"] = poisoning_summary(plan, attributes, window_defence(store, plan, name, start, stats),
                                            int(stats.devices), postprocess)
    return result


def attribute_entries(plan: Plan, estimates: dict[str, Estimate], postprocess: PostProcess,
                      distributions: dict[str, Distribution | None] | None = None) -> dict[str, Any]:
    """Per attribute, its entry of `collection_estimates` (`attribute_entry`); `distributions`: per numeric attribute
    with a distribution mechanism, its distribution (None while no device has reported it)."""
    distributions = distributions or {}
    return {attr.name: attribute_entry(plan, attr, estimates[attr.name], postprocess, attr.name in distributions,
                                       distributions.get(attr.name)) for attr in plan.spec.attributes}


def poisoning_summary(plan: Plan, raw: dict[str, Any], defence: WindowDefence, reports: int,
                      postprocess: PostProcess) -> dict[str, Any]:
    """The window's "suspected poisoning" figure (docs/explanation/fake-devices.md): where it comes from, the
    reference, the reports set aside (fraction of the window's), the alert (that fraction above the threshold, or any
    attribute suspected: a demoted item or a heavy hitter's capped prefix sets little or nothing aside), and per
    attribute the detectors' findings, the suspects, the gain removed, the defended estimate and where its accepted
    level starts (`ldp poisoning accept`; None if never accepted)."""
    policy = DEFAULT_POLICY
    defended = attribute_entries(plan, plan.estimate(defence.defended, defence.caps), postprocess)
    attributes: dict[str, Any] = {}
    for j, attr in enumerate(plan.spec.attributes):
        d = defence.attributes[j]
        labels = _suspect_labels(attr, d)
        attributes[attr.name] = {
            "status": d.status, "set_aside": round(d.set_aside, 3), "suspects": labels,
            "gain_removed": _gain_removed(raw[attr.name], defended[attr.name], labels),
            "findings": [{"detector": f.detector, "status": f.status, "set_aside": round(f.set_aside, 3),
                          "detail": f.detail} for f in d.findings],
            "estimate": defended[attr.name],
            "accepted_from_ms": since.from_ms if (since := defence.accepted.get(j)) is not None else None}
    fraction = defence.set_aside / reports if reports else 0.0
    return {"source": defence.source, "audited_ms": defence.audited_ms,
            "reference": {"windows": defence.reference_windows, "reports": defence.reference_reports}
            if defence.reference_windows else None,
            "set_aside": round(defence.set_aside, 3), "set_aside_fraction": fraction,
            "alert": fraction > policy.alert_fraction
            or any(d.status == SUSPECTED for d in defence.attributes.values()),
            "alert_threshold": policy.alert_fraction,
            "false_positive": {"per_report": policy.alpha_report, "per_window": policy.alpha_window},
            "attributes": attributes}


def _suspect_labels(attr: Any, defence: Any) -> list[str]:
    """The suspects of an attribute by name: its values or keys (strings: the capped ones); a numeric attribute's
    output bins (`output_density`) and "mean" where a test on its mean (its bound, the tests over windows) is
    suspected."""
    if isinstance(attr, StringAttribute):
        return list(defence.strings)
    names = attr.labels if isinstance(attr, KeyValueAttribute) else (
        attr.values if isinstance(attr, CategoricalAttribute) and attr.workload is None else None)
    if names is None:
        if isinstance(attr, CategoricalAttribute):
            return []
        bins = sorted({c for f in defence.findings if f.detector == DENSITY for c in f.suspects})
        mean = any(f.status == SUSPECTED and f.detector != DENSITY for f in defence.findings)
        return [f"bin {c}" for c in bins] + (["mean"] if mean else [])
    return [names[c] for c in defence.suspects() if 0 <= c < len(names)]


def _gain_removed(raw: dict[str, Any], defended: dict[str, Any], suspects: list[str]) -> float:
    """What the defence took off the suspects' estimates (frequencies: summed; a mean: the distance moved)."""
    if "mean" in raw:
        before, after = raw.get("mean"), defended.get("mean")
        return abs(before - after) if before is not None and after is not None else 0.0
    total = 0.0
    for kind in ("frequencies", "means"):
        before, after = raw.get(kind, {}), defended.get(kind, {})
        for label in suspects:
            x, y = before.get(label, {}).get("estimate"), after.get(label, {}).get("estimate")
            if x is not None and y is not None:
                total += abs(x - y)
    return total


def attribute_entry(plan: Plan, attr: Attribute, est: Estimate, postprocess: PostProcess = "none",
                    has_distribution: bool = False, distribution: Distribution | None = None) -> dict[str, Any]:
    """One attribute's entry of `collection_estimates` from its estimate (shapes in that function's docstring); a
    numeric attribute with a distribution mechanism (`has_distribution`) also carries its distribution's figures."""
    entry: dict[str, Any]
    if isinstance(attr, CategoricalAttribute) and attr.workload is not None:
        labels = query_labels(attr.workload, attr.values, len(np.atleast_1d(est.value)))
        entry = {"workload": attr.workload, "answers": {
            q: {"estimate": _float(f), "stderr": _float(se)} for q, f, se in zip(labels, est.value, est.stderr,
                                                                                 strict=True)}}
    elif isinstance(attr, KeyValueAttribute):
        value, stderr = np.asarray(est.value), np.asarray(est.stderr)
        entry = {kind: {k: {"estimate": _float(x), "stderr": _float(se)}
                        for k, x, se in zip(attr.labels, value[row], stderr[row], strict=True)}
                 for row, kind in enumerate(("frequencies", "means"))}
        if postprocess == "clip":
            entry["postprocessed"] = {"method": "clip", "means": {
                k: float(clip_mean(x, *attr.range)) for k, x in zip(attr.labels, value[1], strict=True)
                if np.isfinite(x)}}
    elif isinstance(attr, StringAttribute):  # the decoded top list, largest first, as frequencies
        entry = {"heavy_hitters": attr.top, "frequencies": {
            item: {"estimate": _float(f), "stderr": _float(s)}
            for item, f, s in zip(est.items, est.value, est.stderr, strict=True)}}  # type: ignore[attr-defined]
    elif isinstance(attr, CategoricalAttribute):
        freqs = np.asarray(est.value, dtype=np.float64)
        entry = {"frequencies": {
            v: {"estimate": _float(f), "stderr": _float(s)} for v, f, s in zip(attr.values, freqs, est.stderr,
                                                                               strict=True)}}
        if postprocess in ("norm_sub", "project") and np.isfinite(freqs).all():
            consistent = norm_sub(freqs) if postprocess == "norm_sub" else project_simplex(freqs)
            entry["postprocessed"] = {"method": postprocess,
                                      "frequencies": dict(zip(attr.values, map(float, consistent), strict=True))}
    else:
        entry = {"mean": _float(est.value), "stderr": _float(est.stderr)}
        if postprocess == "clip" and np.isfinite(est.value):
            entry["postprocessed"] = {"method": "clip", "mean": float(clip_mean(est.value, *attr.range))}
        if has_distribution:
            entry["distribution"] = None if distribution is None else distribution.to_dict()
    entry["mechanism"] = plan.mechanisms[plan.spec.attribute_index(attr.name)].name
    return entry


def attribute_distribution(store: StatsStore, plan: Plan, attribute: str, window: str = ALL_TIME,
                           levels: tuple[float, ...] = DEFAULT_QUANTILES) -> dict[str, Any]:
    """{"collection", "version", "window", "window_start_ms", "attribute", "distribution"} for one attribute: the
    "distribution" entry of `collection_estimates` (null while no device has reported it), quantiles at `levels`.

    SpecError (a 4xx for the read API, exit 2 for the CLI) for an unknown attribute, one that is not numeric, or a
    numeric one whose mechanism gives its mean only; LDPError for levels outside (0, 1).
    """
    attr = plan.spec.attributes[plan.spec.attribute_index(attribute)]
    mech = plan.mechanisms[plan.spec.attribute_index(attribute)]
    if attr.type != "numeric":
        raise SpecError(f"{plan.spec.key}: attribute {attribute!r} is {attr.type}: distributions and quantiles are "
                        "estimated for numeric attributes only")
    if not isinstance(mech, DistributionMechanism):
        raise SpecError(f"{plan.spec.key}: attribute {attribute!r} is reported by {mech.name!r}, which gives its mean "
                        "only; a spec asks for a distribution with a distribution mechanism (mechanism: sw)")
    name, start = resolve_window(store, plan, window)
    dist = plan.distributions(store.read_window(plan.spec.name, plan.spec.version, name, start, plan.sizes))[attribute]
    return {"collection": plan.spec.name, "version": plan.spec.version,
            "window": name if name == ALL_TIME else f"{name}:{start}", "window_start_ms": start,
            "attribute": attribute, "distribution": None if dist is None else dist.to_dict(levels)}


def shuffle_summary(store: StatsStore, plan: Plan, window: str, start_ms: int) -> dict[str, Any]:
    """A shuffled collection's released batches in a window: per batch its size, eps0, the central (epsilon,
    delta) and the bound that gave it (`ldpstream.contract.shuffled.WindowFigures`), and the largest batch epsilon.
    A device is in at most one batch per dedupe window; one in several batches composes them (`ldp privacy shuffle
    --windows`)."""
    path = report_path(plan.spec).summary(plan.spec)
    assert path is not None
    end = float("inf") if window == ALL_TIME else start_ms + window_seconds(window) * 1000
    batches = [msgspec.structs.asdict(f) for f in store.shuffle_figures(plan.spec.name)
               if f.spec_version == plan.spec.version and (window == ALL_TIME or start_ms <= f.window_ms < end)]
    return {**path, "epsilon0": plan.spec.epsilon, "batches": batches,
            "max_batch_epsilon": max((b["epsilon"] for b in batches), default=None)}
