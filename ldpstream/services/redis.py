"""A local Redis server on loopback with append-only persistence, data under the state dir."""

from __future__ import annotations

from ldpstream.services.base import LocalService
from ldpstream.services.debian import debian_program
from runtime.process import ServiceError, port_in_use, spawn, wait_until
from runtime.redis import redis_answers
from runtime.settings import Settings


class RedisService(LocalService):
    """The local Redis server (or, with REDIS_URL set, an existing one that we only check)."""

    name = "redis"
    external_variable = "REDIS_URL"
    probe = "PING"
    process = "redis"

    def __init__(self, config: Settings) -> None:
        super().__init__(config)
        self.conf = self.home / "redis.conf"

    @property
    def external(self) -> str | None:
        return self.cfg.redis_url

    @property
    def address(self) -> str:
        return self.cfg.redis

    def answers(self, timeout_s: float) -> bool:
        return redis_answers(self.address, timeout_s)

    def describe(self) -> str:
        return "append-only persistence"

    def launch(self) -> str:
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

    @staticmethod
    def _redis_server() -> str:
        """redis-server from PATH, or Debian's package installed when we are root."""
        return debian_program("redis-server", "redis-server", "or point REDIS_URL at an existing server")
