"""The app's privacy policy: what a device accepts, whatever the collector asks. The server cannot change it.

Local differential privacy protects a device's owner from the collector only if the device decides how much it
gives: every deployed system we compare with fixes its budgets on the device (Chrome compiles RAPPOR's parameters
into the browser; Apple ships per-feature budgets with the OS). A signed spec proves who published it, not that it
is reasonable: a compromised admin key can sign epsilon = 50. So before a device believes a spec, `judge` holds it
against the policy, computing what the spec really spends with the device's own code (the collector the spec
resolves to, `ldpstream.contract.collector.privacy_budgets`: a mechanism whose parameters would spend more than
the spec states is refused as such), and at every report the ledger holds the spend to the daily and lifetime
caps (`ldpstream.device.ledger`).

The fields, and their defaults when the app sets nothing (on by default):

- `max_epsilon_per_report` = 8: the largest per-donation budget Apple publishes (its "Differential Privacy Overview",
  2017: 2 for health types, 4 for emoji and lookup hints, 8 for QuickType and Safari's domains).
- `max_epsilon_per_day` = 16, over every collection of the device together: the largest daily total Tang et al.
  measured in Apple's deployment ("Privacy Loss in Apple's Implementation of Differential Privacy on MacOS 10.12",
  2017: 1 or 2 per datum, up to 16 a day for its four applications). Unlike Apple's, a day's budget does not add to
  a lifetime without bound: the lifetime caps below hold over all days.
- `max_lifetime_per_collection` = 8: what the device may ever spend on one collection (keyed by name, so a new
  version or a renamed copy does not start afresh). About twice RAPPOR's lifetime bound for one value in Chrome
  (eps_inf = 2h ln((1 - f/2) / (f/2)) = 4 ln 3 = 4.39 at f = 0.5, h = 2; Erlingsson et al., CCS 2014, Sec. 3): room
  for a memoized collection over two values. A spec with a lifetime budget (`privacy`) commits that budget; a spec
  without one commits this cap, and the device stops reporting to it when its odometer reaches it.
- `max_lifetime_per_device` = 32: the sum of the lifetimes the device has committed to, over every collection it
  ever accepted (four collections at the cap). No deployed system caps this (Apple renews its budget daily, so its
  total grows with every day since opt-in, which Tang et al. criticise); without it, ten collections asking the same
  question under ten names would each get a full budget.
- `allowed_mechanisms`: every mechanism this SDK implements (all are eps-LDP with the epsilon they are built
  with); an app may narrow it.

A refused spec charges nothing and sends nothing; `Verdict.reason` says why, and the device keeps it for the app.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ldpstream.contract.collector import Strategies, privacy_budgets
from ldpstream.contract.spec import CollectionSpec, SpecError
from ldpstream.contract.training import DEVICE_MECHANISMS, JobSpec
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError

EVERY_MECHANISM = frozenset([*registry.known_names(), *registry.KEYVALUE, *registry.HEAVY_HITTERS, "factorization",
                             *registry.DISTRIBUTION, *DEVICE_MECHANISMS])
BUDGET_RTOL = 1e-9  # relative slack on sums of floating-point budgets


class PolicyError(ValueError):
    """A policy file or object that is not a policy (the message says which field)."""


@dataclass(frozen=True)
class PrivacyPolicy:
    """What the app lets its devices spend (module docstring: the fields, their defaults and their sources)."""

    max_epsilon_per_report: float = 8.0
    max_epsilon_per_day: float = 16.0
    max_lifetime_per_collection: float = 8.0
    max_lifetime_per_device: float = 32.0
    allowed_mechanisms: frozenset[str] = field(default=EVERY_MECHANISM)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "allowed_mechanisms":
                unknown = sorted(set(value) - EVERY_MECHANISM)
                if unknown:
                    raise PolicyError(f"allowed_mechanisms names mechanisms this SDK does not know: {unknown}")
            elif type(value) not in (int, float) or not (math.isfinite(value) and value > 0):
                raise PolicyError(f"{f.name} must be a finite number > 0, got {value!r}")
        if self.max_lifetime_per_collection > self.max_lifetime_per_device:
            raise PolicyError("max_lifetime_per_collection cannot exceed max_lifetime_per_device")

    @classmethod
    def from_dict(cls, data: Any) -> PrivacyPolicy:
        """A policy from a mapping of its fields (missing ones take the defaults); PolicyError otherwise."""
        if not isinstance(data, Mapping):
            raise PolicyError("a policy is a mapping of its fields")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise PolicyError(f"unknown policy fields {unknown} (known: {sorted(names)})")
        values = dict(data)
        if "allowed_mechanisms" in values:
            allowed = values["allowed_mechanisms"]
            if not isinstance(allowed, list | tuple | frozenset | set) or not all(isinstance(m, str) for m in allowed):
                raise PolicyError("allowed_mechanisms is a list of mechanism names")
            values["allowed_mechanisms"] = frozenset(allowed)
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> PrivacyPolicy:
        """A policy from a JSON or YAML file; PolicyError if it cannot be read or is not a policy."""
        import yaml  # YAML is JSON's superset: one parser for both

        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise PolicyError(f"cannot read the policy {path}: {exc}") from exc
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The policy's fields (`allowed_mechanisms` sorted)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["allowed_mechanisms"] = sorted(self.allowed_mechanisms)
        return out


@dataclass(frozen=True)
class Verdict:
    """Whether a device accepts a spec; if not, the rule it breaks (`code`, which the test vectors name) and why;
    if it does, the lifetime it commits to."""

    accepted: bool
    code: str = ""  # policy_unbuildable | policy_epsilon_per_report | policy_epsilon_per_day | policy_mechanism |
    # policy_lifetime_per_collection | policy_lifetime_per_device
    reason: str = ""
    commitment: float = 0.0  # the lifetime budget accepting the spec reserves for its collection

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "code": self.code, "reason": self.reason, "commitment": self.commitment}


def commitment(spec: CollectionSpec, policy: PrivacyPolicy) -> float:
    """What accepting the spec reserves of the device's lifetime budget: its lifetime budget, or the policy's
    per-collection cap for a spec without one (its spend grows with every report until the cap stops it)."""
    return spec.privacy.lifetime if spec.privacy is not None else policy.max_lifetime_per_collection


def judge(spec: CollectionSpec, policy: PrivacyPolicy, committed: Mapping[str, float],
          strategies: Strategies | None = None) -> Verdict:
    """Accept the spec under the policy, given the lifetimes already committed to by collection name; or refuse it
    with the reason (the first rule it breaks)."""
    try:
        budgets = privacy_budgets(spec, strategies)
    except (SpecError, LDPError) as exc:
        return Verdict(False, "policy_unbuildable",
                       f"the spec's mechanisms cannot be built or do not keep its budget: {exc}")
    per_report = float(budgets["per_report"])
    if per_report > policy.max_epsilon_per_report * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_epsilon_per_report",
                       f"epsilon per report {per_report:g} exceeds the policy's max_epsilon_per_report "
                       f"{policy.max_epsilon_per_report:g}")
    if per_report > policy.max_epsilon_per_day * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_epsilon_per_day",
                       f"epsilon per report {per_report:g} exceeds the policy's max_epsilon_per_day "
                       f"{policy.max_epsilon_per_day:g}")
    refused = sorted({a["mechanism"] for a in budgets["attributes"].values()} - policy.allowed_mechanisms)
    if refused:
        return Verdict(False, "policy_mechanism", f"mechanisms {refused} are not among the policy's allowed_mechanisms")
    wanted = commitment(spec, policy)
    if wanted > policy.max_lifetime_per_collection * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_lifetime_per_collection",
                       f"the spec's lifetime budget {wanted:g} exceeds the policy's max_lifetime_per_collection "
                       f"{policy.max_lifetime_per_collection:g}")
    return device_lifetime(spec.name, wanted, policy, committed)


def device_lifetime(name: str, wanted: float, policy: PrivacyPolicy, committed: Mapping[str, float]) -> Verdict:
    """Accept committing `wanted` to `name` (a collection, or a job's `job/JOB`) if, with what is committed to the
    others, the device stays within `max_lifetime_per_device`; the commitment never shrinks."""
    needed = max(committed.get(name, 0.0), wanted)
    others = math.fsum(v for key, v in committed.items() if key != name)
    if others + needed > policy.max_lifetime_per_device * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_lifetime_per_device",
                       f"accepting {name!r} would commit {others + needed:g} over the device's collections "
                       f"({len(committed)} accepted before, {others:g} committed to others) > the policy's "
                       f"max_lifetime_per_device {policy.max_lifetime_per_device:g}")
    return Verdict(True, commitment=needed)


def policy_json(policy: PrivacyPolicy) -> str:
    """The policy as JSON (what `PrivacyPolicy.load` reads back)."""
    return json.dumps(policy.to_dict(), sort_keys=True)


def judge_job(job: JobSpec, policy: PrivacyPolicy, committed: Mapping[str, float]) -> Verdict:
    """Accept a training job under the policy (protocol section 13.1), with the same fields and codes as a
    collection: its epsilon per update against the per-report and per-day caps, its mechanism against the allowed
    ones, its cap parameters against its epsilon (`policy_unbuildable` if they spend more), and the most it can cost,
    epsilon * max_rounds, against the per-collection and per-device lifetimes (keyed `job/JOB`)."""
    from ldpstream.mechanisms.gradients.device import cap_ratio

    eps, name = job.epsilon, job.mechanism.name
    try:
        ratio = cap_ratio(job.mechanism.p, job.mechanism.q)
    except LDPError as exc:
        return Verdict(False, "policy_unbuildable", f"the job's mechanism cannot be built: {exc}")
    if not ratio <= math.exp(eps) * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_unbuildable", f"the job's cap parameters spend eps = {math.log(ratio):.6g}, "
                                                    f"more than its stated epsilon {eps:g}")
    if eps > policy.max_epsilon_per_report * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_epsilon_per_report", f"epsilon per update {eps:g} exceeds the policy's "
                                                           f"max_epsilon_per_report {policy.max_epsilon_per_report:g}")
    if eps > policy.max_epsilon_per_day * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_epsilon_per_day", f"epsilon per update {eps:g} exceeds the policy's "
                                                        f"max_epsilon_per_day {policy.max_epsilon_per_day:g}")
    if name not in policy.allowed_mechanisms:
        return Verdict(False, "policy_mechanism", f"mechanism {name!r} is not among the policy's allowed_mechanisms")
    wanted = eps * job.max_rounds
    if wanted > policy.max_lifetime_per_collection * (1 + BUDGET_RTOL):
        return Verdict(False, "policy_lifetime_per_collection",
                       f"the job can cost {wanted:g} (eps {eps:g} x {job.max_rounds} rounds) > the policy's "
                       f"max_lifetime_per_collection {policy.max_lifetime_per_collection:g}")
    return device_lifetime(job.key, wanted, policy, committed)
