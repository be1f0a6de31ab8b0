"""Every long-running command fails in one line, with a non-zero status, when its port is taken or Kafka and Redis
do not answer: never a traceback, never a restart loop (`ldp edge` on a busy port printed a 25-line traceback every
4 s, forever). No services needed: the addresses point where nothing listens; the commands run side by side."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.runtime.supervisor import EXIT_UNUSABLE

NOWHERE = {"KAFKA_BOOTSTRAP": "127.0.0.1:9", "REDIS_URL": "redis://127.0.0.1:9/0"}  # port 9 (discard): closed here
JOB = str(PROJECT_ROOT / "examples" / "sgd_logistic.yaml")


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port another process (this one) listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def run_all(commands: dict[str, list[str]], timeout_s: float = 120) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run the commands side by side (with Kafka and Redis nowhere); each one's result."""
    procs = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env={**os.environ, **NOWHERE}) for name, argv in commands.items()}
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


def ldp(*args: str) -> list[str]:
    return [sys.executable, "-m", "ldpstream", *args]


def assert_one_line(name: str, result: subprocess.CompletedProcess[str], says: str) -> None:
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode not in (0, None), f"{name}: exit {result.returncode}"
    assert not any("Traceback" in line or "restarting" in line for line in lines), f"{name}: {lines}"
    errors = [line for line in lines if "error" in line.lower() or "cannot" in line]
    assert len(errors) == 1 and says in errors[0], f"{name}: {lines}"


def test_a_taken_port_is_one_line(busy_port: int) -> None:
    port = str(busy_port)
    results = run_all({
        "ldp edge": ldp("edge", "--port", port),
        "ldp serve": ldp("serve", "--port", port),
        "ldp aggregate": ldp("aggregate", "--metrics-port", port),
        "ldp train --job": ldp("train", "--job", JOB, "--metrics-port", port),
        "edge process": [sys.executable, "-m", "ldpstream.edge", "--port", port],
        "aggregator worker": [sys.executable, "-m", "ldpstream.aggregator", "--metrics-port", port],
    })
    for name, result in results.items():
        assert_one_line(name, result, f"127.0.0.1:{port}")
    # a child of a supervisor says it cannot run as configured: the supervisor does not start it again
    assert results["edge process"].returncode == EXIT_UNUSABLE
    assert results["aggregator worker"].returncode == EXIT_UNUSABLE


def test_kafka_and_redis_not_answering_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = str(s.getsockname()[1])
    results = run_all({
        "ldp edge": ldp("edge", "--port", free),
        "ldp serve": ldp("serve", "--port", free),
        "ldp aggregate": ldp("aggregate"),
        "ldp shuffle": ldp("shuffle"),
        "ldp train --job": ldp("train", "--job", JOB),
    })
    for name, result in results.items():
        assert_one_line(name, result, "ldp up")
