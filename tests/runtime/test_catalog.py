"""The service catalog (`ldpstream.runtime.catalog`) is consistent: names, jobs and ports once each, every process it
names exists, every command is an `ldp` command, and every principal a service acts as has its rights."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ldpstream.cli.commands import COMMANDS
from ldpstream.runtime.access import KAFKA_GRANTS, PRINCIPALS, REDIS_RULES
from ldpstream.runtime.catalog import OPEN, SERVICES, TOKEN, Service, service


def test_names_jobs_and_ports_are_unique() -> None:
    assert len({s.name for s in SERVICES}) == len(SERVICES)
    declared = [s.metrics for s in SERVICES if s.metrics is not None]
    assert len({m.job for m in declared}) == len({m.port for m in declared}) == len(declared)
    assert all(m.access in (OPEN, TOKEN) and m.job.startswith("ldp-") for m in declared)
    with pytest.raises(KeyError, match="one of"):
        service("no-such-service")


@pytest.mark.parametrize("svc", SERVICES, ids=lambda s: s.name)
def test_each_service_runs_something_that_exists_as_a_principal_with_rights(svc: Service) -> None:
    assert svc.command in COMMANDS, f"{svc.name}: `ldp {svc.command}` is no command"
    if svc.module is not None:
        assert importlib.util.find_spec(svc.module) is not None, f"{svc.name}: no module {svc.module}"
        assert svc.argv("--x") == [sys.executable, "-m", svc.module, "--x"]
    else:
        assert svc.argv("--x") == [sys.executable, "-m", "ldpstream", svc.command, "--x"]
    who = svc.principal.name
    assert who in PRINCIPALS and KAFKA_GRANTS[who] and "~ldp:" in REDIS_RULES[who]  # our keys, not all
    assert svc.health is None or svc.health.startswith("/")
