"""Privacy over a training job: what a device spends when it takes part in several rounds.

A round takes the reports of B devices. A job of T epochs over N devices deals each epoch's devices in a fresh
random order into N // B rounds (the sampling rate of a round is q = B / N), so every device takes part in at most
T rounds: `participations` = T (exactly T when B divides N). Each participation releases one report of an
eps-LDP randomizer (or (eps, delta)-LDP for the Gaussian reference) on the device's gradient at that round's model,
chosen adaptively; by sequential composition (000 Lemma 4; the device ledger's odometer, `ldpstream.device.ledger`)
the device's reports together are (k eps, k delta)-LDP for k participations: `lifetime_epsilon`.

Against the server, who sees which device sent each report, subsampling does not amplify: q shows how often a device
spends, not a discount. `lifetime_epsilon_at_delta` is the tight composition of the k pure-eps releases at a small
total delta: the exact optimal composition of k eps-DP releases (`ldpstream.mechanisms.composition`, Kairouz, Oh
and Viswanath 2015); it is at most k eps and helps only when eps is small and k large.
"""

from __future__ import annotations

import math
from typing import Any

from ldpstream.mechanisms.composition import composed_epsilon
from ldpstream.sgd.models import TrainingError

ACCOUNTING_DELTA = 1e-5


def rounds_per_epoch(devices: int, clients_per_round: int) -> int:
    """N // B: the full rounds of one epoch (the devices left over in an epoch's order wait for the next)."""
    if clients_per_round < 1 or devices < clients_per_round:
        raise TrainingError(f"need 1 <= clients per round <= devices, got B = {clients_per_round}, N = {devices}")
    return devices // clients_per_round


def job_privacy(epsilon_per_report: float, participations: int, sampling_rate: float | None,
                delta_per_report: float = 0.0, delta: float = ACCOUNTING_DELTA) -> dict[str, Any]:
    """A device's lifetime guarantee over a job (module docstring), as the JSON the trainer and `ldp train status`
    show; `sampling_rate` None where the population is not known.

    Examples
    --------
    >>> job_privacy(8.0, 10, 0.01)["lifetime_epsilon"]
    80.0
    """
    if not (math.isfinite(epsilon_per_report) and epsilon_per_report > 0) or participations < 0:
        raise TrainingError(f"need eps > 0 and participations >= 0, got {epsilon_per_report}, {participations}")
    if sampling_rate is not None and not 0 <= sampling_rate <= 1:
        raise TrainingError(f"a sampling rate lies in [0, 1], got {sampling_rate}")
    out: dict[str, Any] = {
        "epsilon_per_report": epsilon_per_report, "participations_per_device": participations,
        "sampling_rate": sampling_rate, "lifetime_epsilon": participations * epsilon_per_report,
        "lifetime_delta": participations * delta_per_report, "composition": "sequential",
    }
    if delta_per_report == 0 and participations > 1:
        out["lifetime_epsilon_at_delta"] = {"delta": delta, "epsilon": composed_epsilon(epsilon_per_report,
                                                                                          participations, delta)}
    return out

