"""What every local service shares: started on loopback by us, or an external one (set by an env variable) that we
only check; a pid file, a log, a data directory; idempotent start, clean stop, status."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from ldpstream.runtime.process import ServiceError, ServiceStatus, read_pid, stop_pid, tail
from ldpstream.runtime.settings import Settings


class LocalService(ABC):
    """The common lifecycle; a service declares how to launch itself, how to probe it and its external address."""

    name: ClassVar[str]
    external_variable: ClassVar[str]  # the env variable that points at an existing server instead
    probe: ClassVar[str]  # what `answers` asks, for error messages
    process: ClassVar[str]  # base name of the pid and log files
    stop_timeout_s: ClassVar[float] = 30.0

    def __init__(self, config: Settings, home: Path | None = None) -> None:
        self.cfg = config
        self.home = home or config.state_dir / self.name
        self.data = self.home / "data"
        self.log = self.home / f"{self.process}.log"
        self.pidfile = self.home / f"{self.process}.pid"

    @property
    @abstractmethod
    def external(self) -> str | None:
        """The external server's address, or None when we run our own."""

    @property
    @abstractmethod
    def address(self) -> str:
        """The address clients use."""

    @abstractmethod
    def answers(self, timeout_s: float) -> bool:
        """True if the server at `address` answers the probe."""

    @abstractmethod
    def describe(self) -> str:
        """What `ldp status` says of our own server."""

    @abstractmethod
    def authentication(self) -> str:
        """Whether the server requires credentials, found by asking it without any: "off", else what it asks for."""

    @abstractmethod
    def launch(self) -> str:
        """Start our own server (none is running) and wait until it answers; what was done."""

    @abstractmethod
    def apply_access(self) -> None:
        """Make a running server's users and permissions those of `ldpstream.runtime.access` (after an upgrade changed
        them)."""

    @property
    def managed(self) -> bool:
        return self.external is None

    @property
    def purgeable(self) -> list[Path]:
        """What `ldp down --purge` deletes: the data of our own server."""
        return [self.data] if self.managed else []

    def running_pid(self) -> int | None:
        """The pid of our own server if it runs."""
        return read_pid(self.pidfile)

    def statuses(self) -> list[ServiceStatus]:
        """What `ldp status` shows: one row per server."""
        return [self.status()]

    def status(self) -> ServiceStatus:
        pid = read_pid(self.pidfile) if self.managed else None
        detail = self.describe() if self.managed else f"external ({self.external_variable})"
        answers = self.answers(2.0)
        authentication = self.authentication() if answers else "-"
        return ServiceStatus(self.name, self.address, self.managed, pid, answers, detail, authentication)

    def start(self) -> str:
        """Start the server unless it runs (idempotent); ServiceError with the reason if it cannot."""
        if not self.managed:
            if not self.answers(10.0):
                raise ServiceError(f"{self.external_variable}={self.address} does not answer {self.probe}")
            return f"using external {self.name} at {self.address}"
        pid = read_pid(self.pidfile)
        if pid is not None:
            if self.answers(3.0):
                self.apply_access()
                return f"already running (pid {pid})"
            raise ServiceError(f"{self.name} process {pid} is running but does not answer at {self.address}; run "
                               f"`ldp down` and retry. Last lines of {self.log}:\n{tail(self.log)}")
        self.home.mkdir(parents=True, exist_ok=True)
        return self.launch()

    def stop(self) -> str:
        """Stop our own server (SIGTERM, then SIGKILL if it hangs)."""
        if not self.managed:
            return "external: not stopped"
        pid = read_pid(self.pidfile)
        if pid is None:
            return "not running"
        stop_pid(pid, timeout_s=self.stop_timeout_s)
        self.pidfile.unlink(missing_ok=True)
        return f"stopped (pid {pid})"
