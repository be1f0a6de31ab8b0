"""`ldp mechanisms list|variance|simulate|distribution` and `ldp audit`: the mechanisms of `src/ldpstream/mechanisms/`
from the command line.

JSON contracts (`--json`):
- variance: {"mechanism", "epsilon", "dims", "domain", "worst_case_variance"}: for a numeric mechanism the
  worst-case variance of one user's report of one attribute (with --dims D, per attribute under the D-dimensional
  scheme, 000 Lemma 6); for a frequency oracle n * Var of a rare value's frequency estimate (004 Table 1).
- simulate: {"mechanism", "epsilon", "n", "dims", "domain", "seed", "trials", "empirical_mse", "theoretical_mse"}:
  mean squared error of the estimated means (numeric) or frequencies (oracle) over `trials` collections from one
  seeded population of n users, next to the closed form (mean over attributes/values of Var / n).
- audit: {"mechanism", "epsilon", "dims", "domain", "reports", "claimed_epsilon", "epsilon_lower_bound",
  "confidence", "n", "inputs", "event", "counts", "within_epsilon"}; exit status 1 when the bound exceeds the
  claimed budget of `reports` reports of one value by one device: T eps for a mechanism with fresh noise,
  min(T eps_1, eps_lifetime) for a longitudinal one (whose --epsilon is its lifetime budget).
- audit --shuffled-batch N: {"epsilon0", "domain", "reports", "delta", "windows", "claimed_epsilon", "claimed_bound",
  "composed_epsilon", "composed_bound", "epsilon_lower_bound", "exact_epsilon", "threshold", "counts", "samples",
  "confidence", "within_claim"} (`ldpstream.mechanisms.shuffle_audit`); exit status 1 when the lower bound exceeds
  the claim for one batch.
- privacy (longitudinal mechanisms): {"mechanism", "epsilon_lifetime", "epsilon_one_report", "parameters"}.
- distribution: {"mechanism", "epsilon", "range", "seed", "report_mean" {"estimate", "stderr"} (the mechanism's
  unbiased mean), then the `Distribution.to_dict` keys: "method", "reports", "grid" (the bins' edges), "density",
  "probabilities", "cdf" and "cdf_stderr" (at the edges), "quantiles" {level: {"estimate", "stderr"}}, "mean",
  "stderr_method", "details"}; with --ranges also "ranges": [{"low", "high", "estimate", "stderr"}] (fractions).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from ldpstream.cli.output import console, fail, print_fields

if TYPE_CHECKING:
    import numpy as np

    from ldpstream.mechanisms.base import Mechanism
    from ldpstream.mechanisms.longitudinal.base import Longitudinal

mechanisms_app = typer.Typer(no_args_is_help=True, add_completion=False, help="LDP mechanisms: variances, simulation.")

MECHANISM = typer.Option(..., "--mechanism", "-m", help="mechanism name, e.g. pm, hm, duchi, oue, olh")
EPSILON = typer.Option(..., "--epsilon", "-e", help="privacy budget per user")
DIMS = typer.Option(1, "--dims", "-d", help="numeric attributes per user (vector mechanisms for d > 1)")
DOMAIN = typer.Option(None, "--domain", "-k", help="domain size K (frequency oracles)")
JSON = typer.Option(False, "--json", help="print JSON")


def build_mechanism(name: str, epsilon: float, dims: int = 1, domain: int | None = None) -> Mechanism:
    """The mechanism a command line names: 1-D numeric, d-dimensional numeric, a frequency oracle, a longitudinal
    mechanism (epsilon its lifetime budget, its other parameters at their defaults) or a distribution mechanism (its
    parameters at their defaults)."""
    from ldpstream.mechanisms import registry
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.multidim import make_vector_mechanism

    if name in registry.DISTRIBUTION:
        if dims != 1 or domain is not None:
            raise LDPError(f"--dims and --domain do not apply to the distribution mechanism {name!r}")
        return registry.make_distribution(name, epsilon)
    registry.mechanism_class(name)  # LDPError naming the known ones, for an unknown name
    if registry.takes_domain(name):
        if dims != 1:
            raise LDPError(f"--dims applies to numeric mechanisms, not to the frequency oracle {name!r}")
        return registry.make(name, epsilon, domain=domain)
    if domain is not None:
        raise LDPError(f"--domain applies to frequency oracles, not to the numeric mechanism {name!r}")
    if name in registry.LONGITUDINAL and dims != 1:
        raise LDPError(f"--dims does not apply to the longitudinal mechanism {name!r}")
    return registry.make(name, epsilon) if dims == 1 else make_vector_mechanism(name, epsilon, dims)


def build_longitudinal(name: str, lifetime: float | None, domain: int | None, options: dict[str, Any]) -> Longitudinal:
    """A longitudinal mechanism from its lifetime budget (or RAPPOR's f) and the options given on the command line.

    `options` holds the given ones only ({"epsilon_first": ..., "f": ...}); one the class does not take is an error.
    """
    from ldpstream.mechanisms import registry
    from ldpstream.mechanisms.base import LDPError

    cls = registry.longitudinal_class(name)
    options = dict(options)
    f = options.pop("f", None)
    build: Any = cls if f is None else getattr(cls, "from_f", None)
    if build is None:
        raise LDPError(f"--f applies to rappor, not to {name!r}")
    accepted = set(inspect.signature(build).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        flags = ", ".join("--" + key.replace("_", "-") for key in unknown)
        raise LDPError(f"{flags} does not apply to {name!r} (it takes {', '.join(sorted(accepted))})")
    if cls.kind == "frequency" and domain is None:
        raise LDPError(f"{name!r} needs --domain")
    positional = [] if cls.kind == "numeric" else [domain]
    if f is not None:
        return build(*positional, f, **options)
    if lifetime is None:
        raise LDPError(f"{name!r} needs --epsilon-lifetime (or --epsilon)")
    return build(lifetime, *positional, **options)


def _worst_case_variance(name: str, epsilon: float, domain: int) -> float:
    from ldpstream.mechanisms import registry
    from ldpstream.mechanisms.open_domain.strings import StringDomain

    if name in registry.KEYVALUE:
        return float(registry.make_keyvalue(name, epsilon, domain).frequency_variance(0.0))
    if name in registry.DISTRIBUTION:
        return float(registry.make_distribution(name, epsilon).worst_case_variance())
    if name in registry.OPEN_DOMAIN:
        # a type[Mechanism] says nothing of its constructor: each open-domain class takes (epsilon, domain, options)
        cls: Any = registry.open_domain_class(name)
        mech: Any = cls(epsilon, StringDomain(8, "abcdefghijklmnopqrstuvwxyz"))
        return float(mech.worst_case_variance() if name in registry.HEAVY_HITTERS else mech.variance(0.0))
    mech = build_mechanism(name, epsilon, domain=domain if registry.takes_domain(name) else None)
    return float(mech.worst_case_variance())


@mechanisms_app.command("list")
def list_mechanisms(
    epsilon: float = typer.Option(1.0, "--epsilon", "-e", help="privacy budget"),
    domain: int = typer.Option(64, "--domain", "-k", help="domain size K for the frequency oracles"),
    as_json: bool = JSON,
) -> None:
    """Every registered mechanism with its worst-case variance at --epsilon (oracles at --domain): n Var of a mean,
    or of a rare value's frequency; key-value mechanisms: of a rare key's frequency among --domain keys (padding 1);
    open-domain ones: of a rare string's frequency, strings of up to 8 lowercase letters; distribution ones: of the
    mean."""
    from ldpstream.mechanisms import registry
    from ldpstream.mechanisms.base import LDPError

    rows = []
    tables = (("numeric", registry.NUMERIC), ("frequency", registry.FREQUENCY), ("longitudinal", registry.LONGITUDINAL),
              ("keyvalue", registry.KEYVALUE), ("open domain", registry.OPEN_DOMAIN),
              ("distribution", registry.DISTRIBUTION))
    for kind, names in tables:
        for name, target in names.items():
            try:
                variance = _worst_case_variance(name, epsilon, domain)
            except LDPError as exc:
                fail(str(exc), code=2)
            rows.append({"mechanism": name, "kind": kind, "class": target, "worst_case_variance": variance})
    if as_json:
        typer.echo(json.dumps({"epsilon": epsilon, "domain": domain, "mechanisms": rows}))
        return
    table = Table("mechanism", "kind", "class", f"worst-case variance (eps={epsilon:g}, K={domain})")
    for r in rows:
        table.add_row(str(r["mechanism"]), str(r["kind"]), str(r["class"]), f"{r['worst_case_variance']:.6g}")
    console.print(table)


@mechanisms_app.command("variance")
def variance(
    mechanism: str = MECHANISM,
    epsilon: float = EPSILON,
    dims: int = DIMS,
    domain: int | None = DOMAIN,
    as_json: bool = JSON,
) -> None:
    """Worst-case variance of one report (numeric, per attribute) or n * Var of a rare frequency (oracles)."""
    from ldpstream.mechanisms.base import LDPError

    try:
        mech = build_mechanism(mechanism, epsilon, dims, domain)
        worst = float(mech.worst_case_variance())  # type: ignore[attr-defined]
    except LDPError as exc:
        fail(str(exc), code=2)
    print_fields(
        {"mechanism": mechanism, "epsilon": epsilon, "dims": dims, "domain": domain, "worst_case_variance": worst},
        as_json,
    )


def simulate_mse(mech: Mechanism, n: int, seed: int, trials: int) -> tuple[float, float]:
    """(empirical, theoretical) MSE of the estimate over `trials` collections from one seeded population."""
    import numpy as np

    from ldpstream.mechanisms.multidim import VectorMechanism

    rng = np.random.default_rng(seed)
    domain = getattr(mech, "domain_size", None)
    if domain is not None:  # a frequency oracle: Zipf-like population over 0..K-1
        weights = 1.0 / np.arange(1, domain + 1)
        values = rng.choice(domain, size=n, p=weights / weights.sum())
        truth = np.bincount(values, minlength=domain) / n
        theoretical = float(np.mean(mech.variance(truth)) / n)  # type: ignore[attr-defined]
    else:
        shape = (n, mech.dims) if isinstance(mech, VectorMechanism) else (n,)
        values = rng.uniform(-1.0, 1.0, shape)
        truth = values.mean(axis=0)
        theoretical = float(np.mean(mech.variance(values).mean(axis=0)) / n)  # type: ignore[attr-defined]
    errors = [
        np.mean((np.asarray(mech.estimate(mech.accumulate(mech.perturb(values, rng))).value) - truth) ** 2)
        for _ in range(trials)
    ]
    return float(np.mean(errors)), theoretical


@mechanisms_app.command("simulate")
def simulate(
    mechanism: str = MECHANISM,
    epsilon: float = EPSILON,
    n: int = typer.Option(..., "--n", "-n", help="users per collection"),
    dims: int = DIMS,
    domain: int | None = DOMAIN,
    seed: int = typer.Option(0, "--seed", "-s", help="seed of the population and the perturbation"),
    trials: int = typer.Option(20, "--trials", help="collections averaged into the empirical MSE"),
    as_json: bool = JSON,
) -> None:
    """Empirical MSE of the estimated means / frequencies next to the closed form."""
    from ldpstream.mechanisms.base import LDPError

    try:
        if n < 1 or trials < 1:
            raise LDPError("--n and --trials must be positive")
        mech = build_mechanism(mechanism, epsilon, dims, domain)
        empirical, theoretical = simulate_mse(mech, n, seed, trials)
    except LDPError as exc:
        fail(str(exc), code=2)
    payload = {
        "mechanism": mechanism,
        "epsilon": epsilon,
        "n": n,
        "dims": dims,
        "domain": domain,
        "seed": seed,
        "trials": trials,
        "empirical_mse": empirical,
        "theoretical_mse": theoretical,
    }
    print_fields(payload, as_json)


def audit(
    mechanism: str = MECHANISM,
    epsilon: float = EPSILON,
    domain: int | None = DOMAIN,
    dims: int = DIMS,
    n: int = typer.Option(500_000, "--n", "-n", help="reports per input in the measurement"),
    seed: int = typer.Option(0, "--seed", "-s", help="seed"),
    confidence: float = typer.Option(0.999, "--confidence", help="confidence of the lower bound"),
    reports: int = typer.Option(1, "--reports", "-T", help="reports of one value by one device (longitudinal mode)"),
    shuffled_batch: int | None = typer.Option(None, "--shuffled-batch", help="audit the shuffle model: batches of "
                                                                           "this many reports (grr)"),
    windows: int = typer.Option(1, "--windows", min=1, help="with --shuffled-batch: the batches a device is in, "
                                                            "composed"),
    delta: float = typer.Option(1e-6, "--delta", help="with --shuffled-batch: the central delta"),
    as_json: bool = JSON,
) -> None:
    """Lower-bound the epsilon a mechanism provides from samples (Clopper-Pearson); exit 1 if above the claim.

    With --reports T > 1 each sample is one device reporting the same value T times (`ldpstream.mechanisms.audit`,
    longitudinal mode). With --shuffled-batch N, the central epsilon of shuffled batches of N reports: the
    accountant's claim for one batch and for --windows batches composed, beside a lower bound measured on
    neighbouring batches (`ldpstream.mechanisms.shuffle_audit`).
    """
    from ldpstream.mechanisms.audit import audit_longitudinal, audit_mechanism
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.longitudinal.base import Longitudinal

    if shuffled_batch is not None:
        _audit_shuffled(mechanism, epsilon, domain or 2, shuffled_batch, delta, windows, n, seed, confidence, as_json)
        return

    try:
        if not 0 < confidence < 1 or n < 1 or reports < 1:
            raise LDPError("--confidence must lie in (0, 1), --n and --reports be positive")
        mech = build_mechanism(mechanism, epsilon, dims, domain)
        n_select = max(1, n // 5)
        if reports == 1:
            result = audit_mechanism(mech, seed=seed, n=n, n_select=n_select, confidence=confidence)
        else:
            result = audit_longitudinal(mech, reports, seed=seed, n=n, n_select=n_select, confidence=confidence)
    except LDPError as exc:
        fail(str(exc), code=2)
    claimed = reports * mech.epsilon
    if isinstance(mech, Longitudinal):
        claimed = min(claimed, mech.epsilon_lifetime)
    within = result.epsilon_lower_bound <= claimed
    payload = {
        "mechanism": mechanism,
        "epsilon": epsilon,
        "dims": dims,
        "domain": domain,
        "reports": reports,
        "claimed_epsilon": claimed,
        **result.to_dict(),
        "within_epsilon": within,
    }
    print_fields(payload, as_json)
    if not within:
        raise typer.Exit(1)


def _audit_shuffled(mechanism: str, epsilon: float, domain: int, batch: int, delta: float, windows: int,
                    samples: int, seed: int, confidence: float, as_json: bool) -> None:
    """`ldp audit --shuffled-batch`: exit 1 if the measured lower bound exceeds the claim."""
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.shuffle_audit import audit_shuffle

    if mechanism != "grr":
        fail(f"--shuffled-batch audits grr (generalized randomized response), not {mechanism!r}", code=2)
    try:
        result = audit_shuffle(epsilon, domain, batch, delta, windows, samples, seed, confidence)
    except LDPError as exc:
        fail(str(exc), code=2)
    print_fields(result.to_dict(), as_json)
    if not result.within:
        raise typer.Exit(1)


@mechanisms_app.command("privacy")
def privacy(
    mechanism: str = MECHANISM,
    domain: int | None = DOMAIN,
    epsilon_lifetime: float | None = typer.Option(None, "--epsilon-lifetime", help="budget of all reports of a value"),
    epsilon_first: float | None = typer.Option(None, "--epsilon-first", help="budget of one report (two-stage)"),
    epsilon: float | None = typer.Option(None, "--epsilon", "-e", help="the memoized budget (1bitmean, dbitflip)"),
    gamma: float | None = typer.Option(None, "--gamma", help="output perturbation flip probability"),
    hashes: int | None = typer.Option(None, "--hashes", help="RAPPOR: Bloom filter hashes h"),
    f: float | None = typer.Option(None, "--f", help="RAPPOR: permanent response noise f"),
    p: float | None = typer.Option(None, "--p", help="RAPPOR: P[report 1 | permanent bit 0]"),
    q: float | None = typer.Option(None, "--q", help="RAPPOR: P[report 1 | permanent bit 1]"),
    bloom_bits: int | None = typer.Option(None, "--bloom-bits", help="RAPPOR: Bloom filter bits k"),
    cohorts: int | None = typer.Option(None, "--cohorts", help="RAPPOR: cohorts m, each with its own hashes"),
    buckets: int | None = typer.Option(None, "--buckets", help="1BitMean: rounding buckets s"),
    sampled: int | None = typer.Option(None, "--sampled", help="dBitFlip: buckets d sampled per device"),
    as_json: bool = JSON,
) -> None:
    """The lifetime and one-report budgets of a longitudinal mechanism, and the parameters they come from."""
    from ldpstream.mechanisms.base import LDPError

    given = {"epsilon_first": epsilon_first, "gamma": gamma, "hashes": hashes, "f": f, "p": p, "q": q,
             "bloom_bits": bloom_bits, "cohorts": cohorts, "buckets": buckets, "sampled": sampled}
    try:
        if epsilon is not None and epsilon_lifetime is not None:
            raise LDPError("give the lifetime budget once: --epsilon-lifetime or --epsilon")
        lifetime = epsilon_lifetime if epsilon_lifetime is not None else epsilon
        mech = build_longitudinal(mechanism, lifetime, domain, {k: v for k, v in given.items() if v is not None})
    except LDPError as exc:
        fail(str(exc), code=2)
    print_fields({"mechanism": mechanism, **mech.privacy()}, as_json)


def read_values(path: Path) -> np.ndarray:
    """One number per line of a text file (blank lines skipped) as float64; LDPError naming the first bad line."""
    import numpy as np

    from ldpstream.mechanisms.base import LDPError

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise LDPError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        values = np.array(text.split(), dtype=np.float64)
    except ValueError:
        for number, line in enumerate(text.splitlines(), start=1):
            for word in line.split():
                try:
                    float(word)
                except ValueError:
                    raise LDPError(f"{path}, line {number}: {word[:40]!r} is not a number (a distribution is "
                                   "estimated for numeric values; categories have frequencies)") from None
        raise LDPError(f"{path}: expected one number per line") from None
    if values.size == 0:
        raise LDPError(f"{path} holds no values")
    if not np.isfinite(values).all():
        raise LDPError(f"{path}, line {int(np.argmin(np.isfinite(values))) + 1}: not a finite number")
    return values


def _parse_range(text: str) -> tuple[float, float]:
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(low), float(high)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not LOW:HIGH") from None


@mechanisms_app.command("distribution")
def distribution(
    values_file: Path = typer.Option(..., "--values", help="text file, one value per line"),
    value_range: tuple[float, float] = typer.Option(..., "--range", help="LO HI: the values' declared range"),
    epsilon: float = EPSILON,
    mechanism: str = typer.Option("sw", "--mechanism", "-m", help="sw (Square Wave + EMS) or hh (hierarchical "
                                                                  "histogram)"),
    bins: int = typer.Option(64, "--bins", "-b", help="bins of the grid over the range (hh: a power of --fanout)"),
    smoothing: float | None = typer.Option(None, "--smoothing", help="sw: EMS smoothing level (1: the paper's "
                                                                      "kernel); default: chosen by cross-validation"),
    fanout: int | None = typer.Option(None, "--fanout", help="hh: the tree's fan-out (default 4)"),
    quantiles: str = typer.Option(",".join(f"{q:g}" for q in (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)),
                                  "--quantiles", help="comma-separated quantile levels in (0, 1)"),
    ranges: list[str] = typer.Option([], "--ranges", help="LOW:HIGH, a range whose fraction to estimate "
                                                          "(repeatable)"),
    seed: int = typer.Option(0, "--seed", "-s", help="seed of the perturbation"),
    as_json: bool = JSON,
) -> None:
    """Perturb the values of a file in process (one device per line) and estimate their distribution: the density on
    the grid, the CDF at its edges, quantiles and range fractions, each with its standard error."""
    import numpy as np

    from ldpstream.mechanisms import registry
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.numeric.scaling import RangeScaler

    try:
        levels = [float(q) for q in quantiles.split(",") if q.strip()]
    except ValueError:
        fail(f"--quantiles must be comma-separated numbers, got {quantiles!r}", code=2)
    try:
        lo, hi = value_range
        scaler = RangeScaler(lo, hi)
        asked = [_parse_range(text) for text in ranges]
        given = {"bins": bins, "smoothing": smoothing, "fanout": fanout}
        parameters = {key: value for key, value in given.items() if value is not None}
        mech = registry.make_distribution(mechanism, epsilon, **parameters)
        values = read_values(values_file)
        outside = np.flatnonzero((values < lo) | (values > hi))
        if outside.size:
            raise LDPError(f"{values_file}: value number {outside[0] + 1}, {values[outside[0]]:g}, is outside --range "
                           f"[{lo:g}, {hi:g}]")
        unit = scaler.to_unit(values)
        stats = mech.accumulate(mech.perturb(unit, np.random.default_rng(seed)))
        dist = mech.distribution(stats).rescaled(lo, hi)
        payload = dist.to_dict(levels)
        mean = scaler.estimate_from_unit(mech.estimate(stats))
        found = [(low, high, *dist.range_probability(low, high)) for low, high in asked]
    except (LDPError, typer.BadParameter) as exc:
        fail(str(exc), code=2)
    result = {"mechanism": mechanism, "epsilon": epsilon, "range": [lo, hi], "seed": seed,
              "report_mean": {"estimate": float(mean.value), "stderr": float(mean.stderr)}, **payload}
    if asked:
        result["ranges"] = [{"low": a, "high": b, "estimate": v, "stderr": se} for a, b, v, se in found]
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table("quantity", "estimate", "stderr",
                  title=f"{mechanism} eps={epsilon:g}: {payload['reports']:,} values on [{lo:g}, {hi:g}], "
                        f"{len(payload['grid']) - 1} bins")
    table.add_row("mean (reports)", f"{float(mean.value):.6g}", f"{float(mean.stderr):.3g}")
    for level, q in payload["quantiles"].items():
        table.add_row(f"quantile {level}", _fmt(q["estimate"]), _fmt(q["stderr"]))
    for a, b, v, se in found:
        table.add_row(f"fraction in ({a:g}, {b:g}]", f"{v:.6g}", f"{se:.3g}")
    console.print(table)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def register(app: typer.Typer) -> None:
    """Add `ldp mechanisms ...` and `ldp audit` to the `ldp` app."""
    app.add_typer(mechanisms_app, name="mechanisms")
    app.command("audit")(audit)
