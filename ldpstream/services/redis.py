"""A local Redis server on loopback with append-only persistence, data under the state dir."""

from __future__ import annotations

import redis as redis_client

from ldpstream.services.config import ServicesConfig
from ldpstream.services.debian import debian_program
from ldpstream.services.process import (
    ServiceError,
    ServiceStatus,
    port_in_use,
    read_pid,
    spawn,
    stop_pid,
    wait_until,
)


def redis_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if the Redis server at `url` answers PING."""
    try:
        return bool(redis_client.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s).ping())
    except redis_client.RedisError:
        return False


class RedisService:
    """The local Redis server (or, with REDIS_URL set, an existing one that we only check)."""

    name = "redis"

    def __init__(self, config: ServicesConfig) -> None:
        self.cfg = config
        self.home = config.state_dir / "redis"
        self.data = self.home / "data"
        self.log = self.home / "redis.log"
        self.pidfile = self.home / "redis.pid"
        self.conf = self.home / "redis.conf"

    @property
    def managed(self) -> bool:
        return self.cfg.redis_url is None

    @property
    def address(self) -> str:
        return self.cfg.redis

    def status(self) -> ServiceStatus:
        pid = read_pid(self.pidfile) if self.managed else None
        detail = "append-only persistence" if self.managed else "external (REDIS_URL)"
        return ServiceStatus(self.name, self.address, self.managed, pid, redis_answers(self.address), detail)

    def start(self) -> str:
        if not self.managed:
            if not redis_answers(self.address, timeout_s=5.0):
                raise ServiceError(f"REDIS_URL={self.address} does not answer PING")
            return f"using external Redis at {self.address}"
        pid = read_pid(self.pidfile)
        if pid is not None:
            if redis_answers(self.address):
                return f"already running (pid {pid})"
            raise ServiceError(f"Redis process {pid} is running but does not answer at {self.address}; run `ldp down`")
        server = self._redis_server()
        if port_in_use(self.cfg.redis_port):
            raise ServiceError(f"port {self.cfg.redis_port} on 127.0.0.1 is already in use by another process: stop "
                               f"it, or set REDIS_PORT, or point REDIS_URL at an existing server")
        self.data.mkdir(parents=True, exist_ok=True)
        template = (self.cfg.deploy_dir / "redis" / "redis.conf.in").read_text()
        self.conf.write_text(template.replace("@PORT@", str(self.cfg.redis_port)).replace("@DATA_DIR@", str(self.data)))
        proc = spawn([server, str(self.conf)], self.log, self.pidfile)
        wait_until(lambda: redis_answers(self.address), lambda: proc.poll() is None, 30.0, "Redis", self.log)
        return f"started (pid {proc.pid}) at {self.address}"

    def stop(self) -> str:
        if not self.managed:
            return "external: not stopped"
        pid = read_pid(self.pidfile)
        if pid is None:
            return "not running"
        stop_pid(pid)
        self.pidfile.unlink(missing_ok=True)
        return f"stopped (pid {pid})"

    @staticmethod
    def _redis_server() -> str:
        """redis-server from PATH, or Debian's package installed when we are root."""
        return debian_program("redis-server", "redis-server", "or point REDIS_URL at an existing server")
