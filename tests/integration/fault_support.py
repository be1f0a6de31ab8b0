"""Fault test support: servers a test owns (a Redis, a Kafka broker) on free loopback ports, a TCP proxy, and an HTTP
proxy in front of the edge that injects faults a device must survive (`FaultProxy`).

A fault test kills or reconfigures only these, never the services other tests and sessions share.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from ldpstream.runtime.access import ADMIN, password
from ldpstream.runtime.process import read_pid
from ldpstream.runtime.redis import redis_answers, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.services import KafkaService
from ldpstream.services.redis import acl_file


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition()` until it is true; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class RedisServer:
    """A redis-server of the test's own: loopback, a free port, append-only file (`appendfsync everysec`, as the
    project's Redis) in `directory`, no automatic rewrite (so one incr file takes every write), and the project's
    ACL users when security is on."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.extra = list(extra)
        cfg = Settings.from_env()
        if cfg.security:
            users = self.dir / "users.acl"
            users.write_text(acl_file(cfg))
            self.extra += ["--aclfile", str(users)]
            if "--replicaof" in extra:  # a replica logs in to its primary
                self.extra += ["--masteruser", ADMIN, "--masterauth", password(cfg, "redis", ADMIN)]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis_client(self.url, 5.0)

    def start(self) -> None:
        """Start it (again: it loads its append-only file) and wait until it answers."""
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--auto-aof-rewrite-percentage", "0", *self.extra]
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: redis_answers(self.url), 30, f"redis-server on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last fsync (the page cache still has every write: see `cut_aof`)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def incr_aof(self) -> Path:
        """The append-only file Redis 7 writes to now (the incr file of its multi-part AOF)."""
        (incr,) = (self.dir / "appendonlydir").glob("*.incr.aof")
        return incr

    def cut_aof(self, size: int) -> None:
        """After `kill`: keep the first `size` bytes of the incr file, as if the writes after them had never
        reached the disk, then let `redis-check-aof --fix` drop a command or MULTI/EXEC block cut in the middle."""
        incr = self.incr_aof()
        assert incr.stat().st_size > size, "nothing was written after the cut point"
        os.truncate(incr, size)
        manifest = next((self.dir / "appendonlydir").glob("*.manifest"))
        check = subprocess.run([shutil.which("redis-check-aof") or "redis-check-aof", "--fix", str(manifest)],
                               input=b"y\n", capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


class TcpProxy:
    """A loopback TCP proxy in a thread, as a virtual IP or Sentinel-aware address would be: `switch` points it at
    another upstream port (None: it refuses, as a cut network link), closing every connection it carries."""

    def __init__(self, upstream: int | None) -> None:
        self.upstream = upstream
        self.port = free_port()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._started.wait(10), "the proxy did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", self.port))
        self._started.set()
        self._loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.upstream is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        self._writers.discard(writer)

    async def _switch(self, upstream: int | None) -> None:
        self.upstream = upstream
        for writer in list(self._writers):
            writer.transport.abort()  # at once, dropping what is buffered: the link is gone
        self._writers.clear()

    def switch(self, upstream: int | None) -> None:
        """Send new connections to port `upstream` (None: refuse them); drop the connections open now."""
        asyncio.run_coroutine_threadsafe(self._switch(upstream), self._loop).result(10)

    def close(self) -> None:
        self.switch(None)
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextmanager
def kafka_broker(live: Settings, state_dir: Path) -> Iterator[KafkaService]:
    """A Kafka broker of the test's own (state under `state_dir`, free ports, the live broker's jars), stopped and
    removed afterwards."""
    cfg = replace(live, state_dir=state_dir, kafka_port=free_port(), kafka_controller_port=free_port(),
                  kafka_bootstrap=None, secrets_dir_override=live.secrets_dir)  # the same principals' passwords
    service = KafkaService(cfg)
    jars = KafkaService(live).lib
    if (jars / ".complete").exists():  # else `start` fetches them with Maven
        service.lib.parent.mkdir(parents=True, exist_ok=True)
        service.lib.symlink_to(jars, target_is_directory=True)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def kill_broker(service: KafkaService) -> None:
    """SIGKILL the broker (no controlled shutdown, no flush) and wait until it is gone."""
    pid = read_pid(service.pidfile)
    assert pid is not None, "the broker is not running"
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: read_pid(service.pidfile) is None, 30, "the killed broker to exit")


LOG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[\d+\] \[[A-Z]+\] ")


def log_times(log: Path, needle: str) -> list[float]:
    """The times (epoch seconds) of the lines of a worker's log (faust's format) containing `needle`."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        match = LOG_TIME.search(line)
        if match and needle in line:
            out.append(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


@dataclass(frozen=True)
class Answer:
    """A canned HTTP answer of a `FaultProxy` route."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class Drip:
    """A `FaultProxy` fault: the answer's first bytes, one every `interval_s`, for at most `for_s` (a slow server)."""

    interval_s: float = 0.5
    for_s: float = 60.0


Fault = Callable[[str, str, bytes], "Answer | Drip | None"]  # (method, path, body) -> a fault, or None: forward


class FaultProxy:
    """An HTTP server between devices and the real edge that injects faults: a device's base URL is
    `proxy.url + "/" + ROUTE`, and `routes[ROUTE](method, path, body)` decides, per request (the path without the
    route), whether it is forwarded to `upstream` (None) or answered with a canned `Answer` or a `Drip`. Every
    request is recorded (`seen`: route, method, path, headers), so a test can show what reached a stranger."""

    def __init__(self, upstream: str | None, routes: dict[str, Fault] | None = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                owner.handle(self, "POST")

            def do_DELETE(self) -> None:  # noqa: N802
                owner.handle(self, "DELETE")

            def log_message(self, *args: object) -> None:
                pass

        self.upstream = upstream
        self.routes = routes if routes is not None else {}
        self.seen: list[tuple[str, str, str, dict[str, str]]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, handler: Any, method: str) -> None:
        import urllib.error
        import urllib.request

        route, _, rest = handler.path.lstrip("/").partition("/")
        path = "/" + rest
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        self.seen.append((route, method, path, dict(handler.headers.items())))
        fault = self.routes[route](method, path, body) if route in self.routes else None
        if isinstance(fault, Drip):
            handler.close_connection = True
            deadline = time.monotonic() + fault.for_s
            with suppress(OSError):
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000:
                    if time.monotonic() > deadline:
                        break
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()
                    time.sleep(fault.interval_s)
            return
        if fault is None and self.upstream is None:
            fault = Answer(404)
        if fault is None:
            headers = {k: v for k, v in handler.headers.items()
                       if k.lower() in ("content-type", "authorization", "if-none-match")}
            request = urllib.request.Request(str(self.upstream) + path, method=method, headers=headers,
                                             data=body if length else None)
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    fault = Answer(answer.status, dict(answer.headers.items()), answer.read())
            except urllib.error.HTTPError as exc:
                fault = Answer(exc.code, dict(exc.headers.items()), exc.read())
        handler.send_response(fault.status)
        for k, v in fault.headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(fault.body)))
        handler.end_headers()
        handler.wfile.write(fault.body)
