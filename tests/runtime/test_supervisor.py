"""The launcher and supervisor of child processes (`ldpstream.runtime.supervisor`), with tiny Python children: a
child dies with its supervisor, even a SIGKILLed one; a child that cannot run stops the supervisor in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from ldpstream.runtime.process import pid_alive
from ldpstream.runtime.supervisor import EXIT_UNUSABLE, STOP_GRACE_S

CHILD = "from ldpstream.runtime.supervisor import die_with_parent; die_with_parent(); import time; time.sleep(120)"


def supervisor_of(child: str, count: int = 2) -> subprocess.Popen[str]:
    """A process running a Supervisor of `count` children `python -c child`; prints the children's pids."""
    code = textwrap.dedent(f"""
        import sys
        from ldpstream.runtime.supervisor import Supervisor, launch

        def start(i):
            proc = launch([sys.executable, "-c", {child!r}])
            print(proc.pid, flush=True)
            return proc

        sys.exit(Supervisor("test", {count}, start).run())
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def children_of(supervisor: subprocess.Popen[str], count: int) -> list[int]:
    assert supervisor.stdout is not None
    return [int(supervisor.stdout.readline()) for _ in range(count)]


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_children_die_with_a_sigkilled_supervisor() -> None:
    supervisor = supervisor_of(CHILD)
    pids = children_of(supervisor, 2)
    try:
        time.sleep(1.0)  # the children are past die_with_parent (the race before it is covered too: by getppid)
        supervisor.kill()
        supervisor.wait(10)
        assert gone_within(pids, STOP_GRACE_S), "an orphan outlived its SIGKILLed supervisor"
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.killpg(pid, signal.SIGKILL)


def test_an_orphan_that_ignores_sigterm_exits_within_the_grace() -> None:
    stubborn = ("import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + CHILD)
    supervisor = supervisor_of(stubborn, 1)
    pids = children_of(supervisor, 1)
    try:
        time.sleep(1.0)
        supervisor.kill()
        supervisor.wait(10)
        time.sleep(1.0)
        assert pid_alive(pids[0])  # SIGTERM ignored: it is not killed at once...
        assert gone_within(pids, STOP_GRACE_S + 2.0)  # ...but exits when its grace is over
    finally:
        if pid_alive(pids[0]):
            os.killpg(pids[0], signal.SIGKILL)


def test_a_child_that_cannot_run_stops_the_supervisor_in_one_line() -> None:
    child = ("import sys; print('child: cannot listen on 127.0.0.1:1: taken', file=sys.stderr); "
             f"sys.exit({EXIT_UNUSABLE})")
    supervisor = supervisor_of(child, 2)
    _, err = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 1
    assert "Traceback" not in err and "restarting" not in err
    assert "cannot listen on 127.0.0.1:1: taken" in err and "cannot run as configured" in err


def test_sigterm_stops_the_supervisor_and_its_children() -> None:
    supervisor = supervisor_of(CHILD)
    pids = children_of(supervisor, 2)
    time.sleep(1.0)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(STOP_GRACE_S + 5) == 0
    assert gone_within(pids, 1.0)
