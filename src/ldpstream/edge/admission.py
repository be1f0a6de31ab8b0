"""Who may send what: a request's signature (step 2 of `ldpstream.edge.app`), and the admission of a turn's checked
requests in one Redis round trip (step 4, `ldpstream.edge.devices.Admission`): not enrolled or revoked, replay (401),
rate (429), and reports whose window the device already used (dropped; all of them: 409)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.contract.auth import AuthError, Signed, parse_authorization, verify
from ldpstream.contract.clock import now_ms
from ldpstream.contract.validation import dedupe_window, mark_ttl_ms
from ldpstream.contract.wire import Envelope
from ldpstream.edge.devices import RATE_LIMITED, REPLAYED, Admission, Admit
from ldpstream.edge.intake import ADMITTED, DUPLICATE, UNAUTHORIZED, Checked, Refusal, without_rows
from ldpstream.edge.intake import RATE_LIMITED as RATE_REASON
from ldpstream.edge.intake import REPLAYED as REPLAY_REASON
from ldpstream.edge.plans import EdgePlan


@dataclass(frozen=True)
class Incoming:
    """A request that authenticated and parsed: who sent it (the signature, for replay; the device's pseudonym), for
    which collection, and its envelope with the plan of its spec version (None: not published)."""

    collection: str
    signed: Signed
    pseudonym: int
    envelope: Envelope
    plan: EdgePlan | None


@dataclass(frozen=True)
class Admitted:
    """A request's reports that passed the checks and admission: its position in the turn, the reports (less those
    whose window the device already used), their window marks, and the positions in the request dropped as
    already reported in their window."""

    index: int
    checked: Checked
    marks: list[str]
    duplicates: list[int]


def authenticate(admission: Admission, name: str, method: str, path: str, authorization: str | None,
                 body: bytes) -> Signed:
    """The device that signed this method, path, time and body (`ldpstream.contract.auth`); Refusal 401 if none
    did (the key is derived, so no lookup)."""
    try:
        signed = parse_authorization(authorization)
        verify(admission.key_of(name, signed.device), signed, method, path, body, now_ms())
    except AuthError as exc:
        raise Refusal(401, UNAUTHORIZED, str(exc)) from None
    return signed


async def admit(admission: Admission, items: Sequence[Incoming], checks: Sequence[Checked | Refusal],
                rate_per_s: int) -> tuple[list[Admitted], dict[int, Refusal]]:
    """Step 4 for the checked requests of a turn (`checks[k]`: the checks' answer to `items[k]`), one Redis round
    trip: the requests admitted, and the refusal of each request turned away (by its position in the turn)."""
    admits, positions = [], []
    for k, (item, checked) in enumerate(zip(items, checks, strict=True)):
        if isinstance(checked, Checked):
            spec = checked.plan.spec
            starts = tuple(checked.window_starts.tolist()) if spec.one_report_per_window else ()
            admits.append(Admit(item.collection, item.signed.device, item.signed.signature, dedupe_window(spec),
                                spec.version, starts, mark_ttl_ms(spec)))
            positions.append(k)
    kept: list[Admitted] = []
    refused: dict[int, Refusal] = {}
    for k, request, answer in zip(positions, admits, await admission.admit(admits), strict=True):
        checked = checks[k]
        assert isinstance(checked, Checked)
        if isinstance(answer, int):
            refused[k] = admission_refusal(answer, rate_per_s)
        elif not answer:
            kept.append(Admitted(k, checked, request.marks, []))
        elif len(answer) == len(checked):
            refused[k] = Refusal(409, DUPLICATE, "the device already reported in the window of every report",
                                 verdicts(checked, checked.rows[answer].tolist()))
        else:
            used = np.zeros(len(checked), dtype=bool)
            used[answer] = True
            marks = [m for m, u in zip(request.marks, used.tolist(), strict=True) if not u]
            kept.append(Admitted(k, without_rows(checked, used), marks, checked.rows[answer].tolist()))
    return kept, refused


def admission_refusal(code: int, rate_per_s: int) -> Refusal:
    """The refusal of a request admission turned away (`ldpstream.edge.devices`: replayed, rate limited, else not
    enrolled or revoked)."""
    if code == REPLAYED:
        return Refusal(401, REPLAY_REASON, "this signature was used before (replayed request)")
    if code == RATE_LIMITED:
        return Refusal(429, RATE_REASON, f"more than {rate_per_s} requests per second")
    return Refusal(401, UNAUTHORIZED, "unknown or revoked device")


def verdicts(checked: Checked, duplicates: Sequence[int]) -> list[str]:
    """The verdict on each report of a request: its refusal by the checks, DUPLICATE at `duplicates` (positions in
    the request: windows the device already used), else ADMITTED."""
    verdicts = [v or ADMITTED for v in checked.verdicts]
    for d in duplicates:
        verdicts[d] = DUPLICATE
    return verdicts
