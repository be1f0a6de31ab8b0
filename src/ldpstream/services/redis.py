"""A local Redis server on loopback with append-only persistence, data under the state dir: the single server of
`ldp up`, or one node of the Redis Cluster of `ldp up --cluster` (`ldpstream.services.cluster`)."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ldpstream.edge.devices import upgrade_devices_hashes
from ldpstream.runtime.access import ADMIN, REDIS_RULES, generate_passwords, password
from ldpstream.runtime.process import ServiceError, port_in_use, spawn, wait_until
from ldpstream.runtime.redis import cluster_nodes, redis_answers, redis_client
from ldpstream.runtime.secrets import replace_secret
from ldpstream.runtime.settings import Settings
from ldpstream.services.base import LocalService
from ldpstream.services.debian import debian_program


class RedisService(LocalService):
    """The local Redis server, or node `node` of the local Redis Cluster (or, with REDIS_URL set, an existing server
    or cluster that we only check)."""

    name = "redis"
    external_variable = "REDIS_URL"
    probe = "PING"
    process = "redis"

    def __init__(self, config: Settings, node: int | None = None) -> None:
        super().__init__(config, None if node is None else config.state_dir / self.name / f"node-{node + 1}")
        self.node = node
        self.port = config.redis_port + (node or 0)
        self.conf = self.home / "redis.conf"
        self.users = self.home / "users.acl"

    @property
    def external(self) -> str | None:
        return self.cfg.redis_url

    @property
    def address(self) -> str:
        return self.cfg.redis if self.node is None or not self.managed else f"redis://127.0.0.1:{self.port}/0"

    def answers(self, timeout_s: float) -> bool:
        return redis_answers(self.address, timeout_s)

    def authentication(self) -> str:
        host, port = self.address_host_port()
        try:  # one attempt: redis-py retries an AuthenticationError (a ConnectionError) with backoff, ~4 s here
            redis.Redis(host=host, port=port, socket_timeout=2.0, socket_connect_timeout=2.0,
                        retry=Retry(NoBackoff(), 0)).ping()
        except redis.AuthenticationError:
            return "ACL users"
        except redis.ResponseError as exc:
            return "on" if "NOAUTH" in str(exc) else f"unknown ({exc})"
        except redis.RedisError as exc:
            return f"unknown ({exc})"
        return "off"

    def address_host_port(self) -> tuple[str, int]:
        """The server's host and port (a cluster's: its first seed's)."""
        seeds = cluster_nodes(self.address)
        if seeds:
            return seeds[0]
        url = urlsplit(self.address)
        return url.hostname or "127.0.0.1", url.port or 6379

    def describe(self) -> str:
        if self.node is None:
            return "append-only persistence"
        return f"cluster node {self.node + 1}: {cluster_role(self.address)}"

    def launch(self) -> str:
        server = self._redis_server()
        if port_in_use(self.port):
            raise ServiceError(f"port {self.port} on 127.0.0.1 is already in use by another process: stop "
                               f"it, or set REDIS_PORT, or point REDIS_URL at an existing server")
        self.data.mkdir(parents=True, exist_ok=True)
        template = (self.cfg.deploy_dir / "redis" / "redis.conf.in").read_text()
        text = template.replace("@PORT@", str(self.port)).replace("@DATA_DIR@", str(self.data))
        if self.node is not None:
            text += CLUSTER_CONF
        if self.cfg.security:
            generate_passwords(self.cfg)
            self.users.write_text(acl_file(self.cfg))
            self.users.chmod(0o600)
            text += f"aclfile {self.users}\n"
            if self.node is not None:  # a replica logs in to its primary as the admin
                text += f"masteruser {ADMIN}\nmasterauth {password(self.cfg, 'redis', ADMIN)}\n"
        replace_secret(self.conf, text.encode())  # 0600: a cluster node's holds the admin's password
        proc = spawn([server, str(self.conf)], self.log, self.pidfile)
        wait_until(lambda: redis_answers(self.address), lambda: proc.poll() is None, 30.0, "Redis", self.log)
        self.upgrade_keys()
        return f"started (pid {proc.pid}) at {self.address}"

    def apply_access(self) -> None:
        """Only the users whose rules changed (an upgrade added a principal or changed its rules), each with ACL
        SETUSER, never ACL LOAD: Redis (7.0) disconnects every client of every user on an ACL LOAD, so a second `ldp
        up` made the next request of a running API answer 503 and of a running edge 500."""
        if self.cfg.security and self.users.exists():
            generate_passwords(self.cfg)  # a principal an upgrade added has none yet
            wanted = acl_file(self.cfg)
            changed, removed = acl_changes(self.users.read_text(), wanted)
            if changed or removed:
                client = redis_client(self.address, 10.0)
                for user, rules in changed.items():
                    client.execute_command("ACL", "SETUSER", user, "reset", *rules)
                for user in removed:
                    client.execute_command("ACL", "DELUSER", user)
                replace_secret(self.users, wanted.encode())
        self.upgrade_keys()

    def upgrade_keys(self) -> None:
        """Give the keys of an earlier version their current names (a single server: a cluster never held them)."""
        if self.node is None:
            upgrade_devices_hashes(redis_client(self.address, 10.0, principal=ADMIN))

    @staticmethod
    def _redis_server() -> str:
        """redis-server from PATH, or Debian's package installed when we are root."""
        return debian_program("redis-server", "redis-server", "or point REDIS_URL at an existing server")


# A cluster node: the slot map in nodes.conf beside its data; a primary unreachable for 2 s is failed over to its
# replica however long that replica was cut off (validity factor 0: availability first; what a lagging replica
# lost is re-read from Kafka by the offset guard, `ldpstream.aggregator.store`); the slots of the other primaries keep
# answering meanwhile (no full coverage required).
CLUSTER_CONF = """cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
cluster-replica-validity-factor 0
cluster-require-full-coverage no
cluster-allow-reads-when-down no
"""


def cluster_role(url: str) -> str:
    """A cluster node's role as CLUSTER NODES tells it: "primary, slots a-b" or "replica of host:port"; "-" if it
    does not answer or is in no cluster yet."""
    try:
        lines = redis_client(url, 2.0, principal=ADMIN).execute_command("CLUSTER", "NODES")
    except (redis.RedisError, OSError):
        return "-"
    text = lines.decode() if isinstance(lines, bytes) else str(lines)
    nodes = {f[0]: f for f in (line.split() for line in text.splitlines()) if len(f) >= 8}
    me = next((f for f in nodes.values() if "myself" in f[2]), None)
    if me is None or len(nodes) == 1:
        return "no cluster yet"
    if "master" in me[2]:
        return f"primary, slots {' '.join(me[8:]) or 'none'}" + (" (failed)" if "fail" in me[2] else "")
    primary = nodes.get(me[3])
    return f"replica of {primary[1].split('@')[0] if primary else me[3]}"


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


def acl_changes(current: str, wanted: str) -> tuple[dict[str, list[str]], list[str]]:
    r"""What turns the ACL file `current` into `wanted`: the users whose line is new or different (name -> rules) and
    the users to delete.

    Examples
    --------
    >>> acl_changes("user default off +@all\nuser api on #a ~x\nuser old on #b\n",
    ...             "user default off +@all\nuser api on #a ~y\nuser edge on #c\n")
    ({'api': ['on', '#a', '~y'], 'edge': ['on', '#c']}, ['old'])
    """
    def users(text: str) -> dict[str, list[str]]:
        return {f[1]: f[2:] for f in (line.split() for line in text.splitlines()) if len(f) >= 2 and f[0] == "user"}

    have, want = users(current), users(wanted)
    return {u: rules for u, rules in want.items() if have.get(u) != rules}, [u for u in have if u not in want]


def password_hash(secret: str) -> str:
    """A Redis ACL password rule that holds the password's SHA-256, never the password."""
    return "#" + hashlib.sha256(secret.encode()).hexdigest()
