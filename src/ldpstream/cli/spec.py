"""`ldp spec validate|publish FILE`: check a collection spec, publish it once (signed). `ldp spec keys
init|list|rotate|retire`: the spec-signing keys (`ldpstream.runtime.signing`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ldpstream.cli.errors import require_services
from ldpstream.cli.output import console, fail, styled

if TYPE_CHECKING:
    from ldpstream.contract.spec import CollectionSpec


spec_app = typer.Typer(no_args_is_help=True, help="Collection specs: validate and publish.")
keys_app = typer.Typer(help="The keys that sign published specs and pointers: what apps pin, and what readers trust.")
spec_app.add_typer(keys_app, name="keys")


@keys_app.callback(invoke_without_command=True)
def keys(ctx: typer.Context,
         as_json: Annotated[bool, typer.Option("--json", help="print what an app pins, as JSON")] = False) -> None:
    """Print the public keys an app pins (`Device.join(trusted_keys=...)`): the spec keys and the edge's pointer
    keys, each current and next (a rotation promotes the next one, so pinned apps keep working)."""
    if ctx.invoked_subcommand is not None:
        return
    import json

    from ldpstream.runtime.join_keys import pinned_keys
    from ldpstream.runtime.settings import Settings

    pinned = pinned_keys(Settings.from_env())
    if as_json:
        typer.echo(json.dumps(pinned, indent=2))
        return
    table = Table("role", "status", "id", "public key (base64)")
    for entry in pinned["keys"]:
        table.add_row(entry["role"], entry["status"], entry["id"], entry["public_key"])
    console.print(table)


def load_checked(path: Path) -> CollectionSpec:
    """The spec (factorization strategies pinned, optimised locally if need be) with its mechanisms built (so an
    unbuildable spec fails here); exit 1 with the reason otherwise."""
    from ldpstream.contract.collector import privacy_budgets, sampled_count
    from ldpstream.contract.spec import SpecError, load_spec
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.runtime.strategies import strategies_for, with_strategies

    try:
        spec = load_spec(path)
        spec = with_strategies(spec, spec.epsilon / sampled_count(spec), bootstrap=None)  # optimised, cached here
        privacy_budgets(spec, strategies_for(spec))  # builds the mechanisms, and checks they keep the budgets
    except (SpecError, LDPError) as exc:
        fail(str(exc), label="invalid spec")
    return spec


def summary(spec: CollectionSpec) -> tuple[str, Table]:
    """A line on the spec's budget, sampling, windows and topic, and a table of its attributes' mechanisms."""
    from ldpstream.contract.collector import privacy_budgets, resolved_mechanisms, sampled_count
    from ldpstream.contract.spec import KeyValueAttribute, NumericAttribute, StringAttribute
    from ldpstream.runtime.strategies import strategies_for

    k, mechanisms = sampled_count(spec), resolved_mechanisms(spec, strategies_for(spec))
    line = (f"{spec.key}: eps = {spec.epsilon:g} per report; k = {k} of {len(spec.attributes)} attributes per "
            f"report (sampling {spec.sampling}), each at eps/k = {spec.epsilon / k:g}; windows "
            f"{', '.join([*spec.windows, 'all'])}; one report per window: {spec.one_report_per_window}; "
            f"topic {spec.topic} ({spec.partitions} partitions)")
    table = Table()
    for column in ("attribute", "type", "domain", "mechanism", "eps one report", "eps_inf per value", "parameters"):
        table.add_column(column)
    budgets = privacy_budgets(spec, strategies_for(spec))
    for a in spec.attributes:
        if isinstance(a, KeyValueAttribute):
            keys = ", ".join(a.keys) if a.keys is not None else f"{a.buckets} hashed buckets"
            domain = f"keys {keys}; values [{a.range[0]:g}, {a.range[1]:g}]; padding l = {a.padding}"
        elif isinstance(a, StringAttribute):
            domain = f"strings of <= {a.max_length} bytes over {a.alphabet or 'any byte'}; top {a.top}"
        else:
            domain = f"[{a.range[0]:g}, {a.range[1]:g}]" if isinstance(a, NumericAttribute) else ", ".join(a.values)
        chosen = mechanisms[a.name] + (" (auto)" if a.mechanism == "auto" else "")
        spend = budgets["attributes"][a.name]
        per_value = "-" if spend["per_value"] is None else f"{spend['per_value']:g}"
        table.add_row(a.name, a.type, domain, chosen, f"{spend['one_report']:g}", per_value,
                      parameter_text(spend["mechanism"], spend["parameters"]))
    return f"{line}\n{spending(budgets, k)}", table


def parameter_text(mechanism: str, parameters: dict[str, Any] | None) -> str:
    """A memoized mechanism's structural parameters (those a spec may set) as "name=value ...", or "-"."""
    from ldpstream.mechanisms import registry

    if parameters is None:
        return "-"
    settable = registry.longitudinal_parameters(mechanism)
    return " ".join(f"{name}={value:g}" for name, value in parameters.items() if name in settable) or "-"


def spending(budgets: dict[str, Any], k: int) -> str:
    """What a device spends per report and over its lifetime, in words (`privacy_budgets`)."""
    per_report = f"a device spends eps = {budgets['per_report']:g} per report"
    if budgets["lifetime"] is None:
        return f"{per_report}; no lifetime bound: T reports cost T x {budgets['per_report']:g} (sequential composition)"
    values = budgets["values"]
    return (f"{per_report} and at most {budgets['lifetime']:g} over its lifetime: its {k} reported attribute(s) "
            f"memoized, each distinct value at {budgets['lifetime'] / (k * values):g}, {values} value(s) per "
            f"attribute; a further value is refused by its ledger")


@spec_app.command("validate")
def validate(file: Annotated[Path, typer.Argument(help="spec file (YAML or JSON)")]) -> None:
    """Check a spec; print OK and its summary (resolved mechanisms, k), or the error and exit 1."""
    spec = load_checked(file)
    line, table = summary(spec)
    console.print(styled(("OK", "green"), f" {file}"))
    console.print(line)
    console.print(table)


@spec_app.command("publish")
def publish(file: Annotated[Path, typer.Argument(help="spec file (YAML or JSON)")]) -> None:
    """Publish a spec to the compacted topic ldp.collections (a published version is immutable)."""
    from ldpstream.contract.spec import SpecError
    from ldpstream.runtime.kafka import DeliveryError, TopicError
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError
    from ldpstream.runtime.specs import publish_spec

    spec = load_checked(file)
    require_services(redis=False)
    try:
        result = publish_spec(spec, Settings.from_env().bootstrap)
    except (SpecError, SigningError, TopicError, DeliveryError) as exc:
        fail(str(exc), label="not published")
    what = "published" if result.created else "already published with the same content"
    console.print(f"{result.key}: {what}; reports go to {result.topic}")


@keys_app.command("init")
def keys_init() -> None:
    """Make the spec-signing key pair if it is missing and trust its public key, and the device join protocol's keys
    (`ldp up` does it too)."""
    from ldpstream.runtime.join_keys import ensure_join_keys
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError, ensure_signing_keys

    cfg = Settings.from_env()
    try:
        console.print(ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys))
        console.print(ensure_join_keys(cfg))
    except SigningError as exc:
        fail(str(exc))


@keys_app.command("list")
def keys_list() -> None:
    """Print the id of every trusted key, marking the one that signs (if this machine has it)."""
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError, key_id, load_signing_key, load_trusted_keys

    cfg = Settings.from_env()
    try:
        trusted = load_trusted_keys(cfg.spec_trusted_keys)
        signer = key_id(load_signing_key(cfg.spec_signing_key).public_key()) if cfg.spec_signing_key.exists() else None
    except SigningError as exc:
        fail(str(exc))
    for kid in trusted:
        console.print(f"{kid.hex()}{'  (signing key)' if kid == signer else ''}")


@keys_app.command("rotate")
def keys_rotate(retire_old: bool = typer.Option(False, "--retire-old",
                                                help="then trust only the new key (once every reader has it)")) -> None:
    """Sign with a new key from now on: trust it beside the old ones, re-publish every spec signed with it."""
    from ldpstream.contract.spec import SpecError
    from ldpstream.runtime.kafka import DeliveryError, TopicError
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError
    from ldpstream.runtime.specs import rotate_signing_key

    try:
        rotation = rotate_signing_key(Settings.from_env().bootstrap, retire_old)
    except (SigningError, SpecError, TopicError, DeliveryError) as exc:
        fail(str(exc), label="rotation not finished")
    console.print(f"signing key {rotation.new_key}: re-signed {len(rotation.resigned)} published spec(s)")
    if rotation.retired:
        console.print(f"no longer trusted: {', '.join(rotation.retired)}")


@keys_app.command("retire")
def keys_retire() -> None:
    """Trust only the signing key (after `rotate`, once every spec is re-signed and every reader trusts it)."""
    from ldpstream.contract.spec import SpecError
    from ldpstream.runtime.kafka import TopicError
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError
    from ldpstream.runtime.specs import retire_old_keys

    try:
        retired = retire_old_keys(Settings.from_env().bootstrap)
    except (SigningError, SpecError, TopicError) as exc:
        fail(str(exc), label="nothing retired")
    console.print(f"no longer trusted: {', '.join(retired) or 'none (only the signing key was trusted)'}")


def register(app: typer.Typer) -> None:
    """Add `ldp spec ...` to the app."""
    app.add_typer(spec_app, name="spec")
