"""A released window's figures from its spec and batch size (`ldpstream.mechanisms.shuffle`), pure."""

from __future__ import annotations

from collections.abc import Mapping

from ldpstream.contract.shuffled import WindowFigures
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.training import JobSpec, job_central
from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.shuffle import central_epsilon


def report_mechanism(mechanisms: Mapping[str, Mechanism]) -> tuple[str | None, int | None]:
    """The mechanism and domain size whose own bound applies to a report of a collection with these mechanisms (by
    attribute): those of its one attribute; (None, None) for several (a report is then eps0-LDP as a whole: the
    general bounds)."""
    if len(mechanisms) != 1:
        return None, None
    mechanism = next(iter(mechanisms.values()))
    return mechanism.name, getattr(mechanism, "domain_size", None)


def window_figures(spec: CollectionSpec, mechanism: tuple[str | None, int | None], window_ms: int, reports: int,
                   rolled: int, released_ms: int) -> WindowFigures:
    """The figures of a batch of `reports` of the spec released at `window_ms` (`rolled` of them from earlier
    windows): the tightest of the bounds that apply at the spec's delta (`local`, eps0 itself, if none is lower)."""
    if spec.shuffle is None:
        raise ValueError(f"{spec.key} is not shuffled")
    epsilon, delta, bound = central_epsilon(spec.epsilon, reports, spec.shuffle.delta, *mechanism)
    return WindowFigures(spec.version, window_ms, reports, rolled, spec.epsilon, epsilon, delta, bound, released_ms)


def job_figures(spec: JobSpec, model_version: int, released_ms: int) -> WindowFigures:
    """The figures of one model version's release of a shuffled job: B updates (`job_central`), stamped with the
    job version and the model version in place of the spec version and the window."""
    central = job_central(spec)
    if central is None:
        raise ValueError(f"{spec.key} is not shuffled")
    epsilon, delta, bound = central
    return WindowFigures(spec.version, model_version, spec.batch_size, 0, spec.epsilon, epsilon, delta, bound,
                         released_ms)
