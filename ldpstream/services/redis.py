"""A local Redis server on loopback with append-only persistence, data under the state dir."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

import redis

from ldpstream.services.base import LocalService
from ldpstream.services.debian import debian_program
from runtime.access import REDIS_RULES, generate_passwords, password
from runtime.process import ServiceError, port_in_use, spawn, wait_until
from runtime.redis import redis_answers, redis_client
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
        self.users = self.home / "users.acl"

    @property
    def external(self) -> str | None:
        return self.cfg.redis_url

    @property
    def address(self) -> str:
        return self.cfg.redis

    def answers(self, timeout_s: float) -> bool:
        return redis_answers(self.address, timeout_s)

    def authentication(self) -> str:
        host, port = self.address_host_port()
        try:
            redis.Redis(host=host, port=port, socket_timeout=2.0, socket_connect_timeout=2.0).ping()
        except redis.AuthenticationError:
            return "ACL users"
        except redis.ResponseError as exc:
            return "on" if "NOAUTH" in str(exc) else f"unknown ({exc})"
        except redis.RedisError as exc:
            return f"unknown ({exc})"
        return "off"

    def address_host_port(self) -> tuple[str, int]:
        url = urlsplit(self.address)
        return url.hostname or "127.0.0.1", url.port or 6379

    def describe(self) -> str:
        return "append-only persistence"

    def launch(self) -> str:
        server = self._redis_server()
        if port_in_use(self.cfg.redis_port):
            raise ServiceError(f"port {self.cfg.redis_port} on 127.0.0.1 is already in use by another process: stop "
                               f"it, or set REDIS_PORT, or point REDIS_URL at an existing server")
        self.data.mkdir(parents=True, exist_ok=True)
        template = (self.cfg.deploy_dir / "redis" / "redis.conf.in").read_text()
        text = template.replace("@PORT@", str(self.cfg.redis_port)).replace("@DATA_DIR@", str(self.data))
        if self.cfg.security:
            generate_passwords(self.cfg)
            self.users.write_text(acl_file(self.cfg))
            self.users.chmod(0o600)
            text += f"aclfile {self.users}\n"
        self.conf.write_text(text)
        proc = spawn([server, str(self.conf)], self.log, self.pidfile)
        wait_until(lambda: redis_answers(self.address), lambda: proc.poll() is None, 30.0, "Redis", self.log)
        return f"started (pid {proc.pid}) at {self.address}"

    def apply_access(self) -> None:
        if self.cfg.security and self.users.exists():
            self.users.write_text(acl_file(self.cfg))
            redis_client(self.address, 10.0).execute_command("ACL", "LOAD")

    @staticmethod
    def _redis_server() -> str:
        """redis-server from PATH, or Debian's package installed when we are root."""
        return debian_program("redis-server", "redis-server", "or point REDIS_URL at an existing server")


def acl_file(cfg: Settings) -> str:
    """Redis ACL users: each principal's rules with its password's SHA-256 (never the password), and the default
    user off: a client that does not authenticate can do nothing (NOAUTH).

    The default user keeps every permission although no one can log in as it: Redis (7.0) replays the append-only
    file as the default user, and re-checks its permissions at each EXEC, so with `-@all` every scripted write
    (scripts are logged as MULTI/EXEC of their effects) was dropped, with a log line, at each restart (tested)."""
    lines = ["user default off resetchannels ~* &* +@all"]
    for principal, rules in REDIS_RULES.items():
        lines.append(f"user {principal} on {password_hash(password(cfg, 'redis', principal))} resetchannels {rules}")
    return "\n".join(lines) + "\n"


def password_hash(secret: str) -> str:
    """A Redis ACL password rule that holds the password's SHA-256, never the password."""
    return "#" + hashlib.sha256(secret.encode()).hexdigest()
