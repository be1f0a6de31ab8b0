"""Where admitted reports go (step 5 of `ldpstream.edge.app`): each request's reports to the topic and partition its
collection's path names (`ldpstream.contract.shuffled.report_path`: the device's partition of the report topic, or,
shuffled, anonymous on any partition of the raw topic), the turn's reports for one partition as one submission to the
forwarder (`ldpstream.edge.forward`); each request is answered once its submission settles: where its reports are
safe, or the submission's refusal (their window marks are then released, so the device can send again)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.contract.pseudonym import device_partitions
from ldpstream.contract.shuffled import report_path
from ldpstream.edge.admission import Admitted, verdicts
from ldpstream.edge.devices import Admission
from ldpstream.edge.forward import Forwarder
from ldpstream.edge.intake import ADMITTED, Checked, Refusal
from ldpstream.runtime.metrics import EDGE_REPORTS

Destination = tuple[str, int, int]  # topic, partition, spec version


@dataclass(frozen=True)
class Accepted:
    """A request's reports are safe: how many, the positions dropped as already reported in their window, where
    they are (`KAFKA` or `SPOOL`), and the verdict on each report of the request (`ADMITTED` or why not)."""

    reports: int
    duplicates: list[int]
    stored: str
    verdicts: list[str]


def destinations(admitted: Sequence[Admitted], pseudonyms: Sequence[int]) -> dict[Destination, list[Admitted]]:
    """The admitted requests (`pseudonyms`: each one's device) by where their reports go, as the path writes them."""
    counts = np.fromiter((a.checked.plan.spec.partitions for a in admitted), dtype=np.int64, count=len(admitted))
    devices = np.fromiter(pseudonyms, dtype=np.uint64, count=len(admitted))
    partitions = np.zeros(len(admitted), dtype=np.int64)
    for count in np.unique(counts).tolist():  # one vectorised pass per partition count (usually one)
        partitions[counts == count] = device_partitions(devices[counts == count], count)
    groups: dict[Destination, list[Admitted]] = {}
    for member, partition in zip(admitted, partitions.tolist(), strict=True):
        spec, checked = member.checked.plan.spec, member.checked
        path = report_path(spec)
        outgoing = Checked(checked.plan, path.outgoing(checked.envelope, checked.window_starts),
                           checked.window_starts, checked.rows, checked.verdicts)
        where = (path.topics(spec)[0], path.partition(spec, partition), spec.version)
        groups.setdefault(where, []).append(Admitted(member.index, outgoing, member.marks, member.duplicates))
    return groups


async def deliver(forwarder: Forwarder, admission: Admission,
                  groups: dict[Destination, list[Admitted]]) -> dict[int, Accepted | Refusal]:
    """Submit each group, wait for all: the answer to each request, by its position in the turn (Accepted, or its
    group's Refusal); a failure that is not a Refusal is raised once every group settled (every request of the
    turn gets it)."""
    results: dict[int, Accepted | Refusal] = {}
    submitted = [(members, _submit(forwarder, topic, partition, members))
                 for (topic, partition, _), members in groups.items()]
    outcomes = await asyncio.gather(*(waiter for _, waiter in submitted), return_exceptions=True)
    released: list[str] = []
    for (members, _), stored in zip(submitted, outcomes, strict=True):
        if isinstance(stored, Refusal):
            released += [m for member in members for m in member.marks]
            for member in members:
                results[member.index] = stored
        elif not isinstance(stored, BaseException):
            EDGE_REPORTS.labels("accepted", "").inc(sum(len(member.checked) for member in members))
            for member in members:
                results[member.index] = _accepted(member, stored)
    await admission.release(released)
    failures = [stored for stored in outcomes if isinstance(stored, BaseException) and not isinstance(stored, Refusal)]
    if failures:
        raise failures[0]  # the forwarder settles with none but a Refusal
    return results


def _accepted(member: Admitted, stored: str) -> Accepted:
    """A request's answer once its reports are safe (its reports refused alone counted by their reason)."""
    said = verdicts(member.checked, member.duplicates)
    for reason in said:
        if reason != ADMITTED:
            EDGE_REPORTS.labels("rejected", reason).inc()
    return Accepted(len(member.checked), member.duplicates, stored, said)


def _submit(forwarder: Forwarder, topic: str, partition: int, members: list[Admitted]) -> asyncio.Future[str]:
    """One partition's submission: a future of where its reports are safe, or of the Refusal."""
    rows = sum(len(member.checked) for member in members)
    try:
        return forwarder.submit(topic, partition, [member.checked.envelope for member in members], rows)
    except Refusal as refusal:
        refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        refused.set_exception(refusal)
        return refused
