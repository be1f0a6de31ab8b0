"""One edge process in the foreground: `python -m ldpstream.edge --port P [--reuse-port] [--spool-dir D] ...`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ldpstream.edge.app import CannotListen, EdgeConfig, serve, server_tls
from ldpstream.edge.join import EnrolLimits
from ldpstream.edge.keyring import Keyring
from ldpstream.runtime.access import act_as
from ldpstream.runtime.catalog import service
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.supervisor import die_with_parent, unusable


def main(argv: list[str] | None = None) -> None:
    defaults = EdgeConfig("", "", Path(), Path())
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--reuse-port", action="store_true", help="share the port with other edge processes")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help="the event loop")
    parser.add_argument("--spool-dir", type=Path, default=None, help="this process's spool (default: state dir)")
    parser.add_argument("--spool-bytes", type=int, default=defaults.spool_bytes)
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes)
    parser.add_argument("--max-reports", type=int, default=defaults.max_reports, help="reports per request")
    parser.add_argument("--rate", type=int, default=defaults.rate_per_s, help="requests per device per second")
    parser.add_argument("--linger-ms", type=float, default=defaults.linger_s * 1000)
    parser.add_argument("--delivery-timeout-ms", type=int, default=defaults.delivery_timeout_ms,
                        help="after this long without a Kafka acknowledgement a message is spooled")
    parser.add_argument("--idle-timeout-s", type=float, default=defaults.idle_timeout_s,
                        help="close a connection that has not completed a request this long after its start or "
                             "its last answer")
    parser.add_argument("--body-timeout-s", type=float, default=defaults.body_timeout_s,
                        help="answer 408 (and close) when a body has not arrived within this")
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections,
                        help="open connections beyond this are answered 503 and closed (at most the open-file "
                             "limit less 256)")
    parser.add_argument("--enrol-per-address", type=int, default=defaults.enrol_limits.per_address_per_minute,
                        help="enrolments a minute from one client address (more are answered 429)")
    parser.add_argument("--enrol-per-token", type=int, default=defaults.enrol_limits.per_token_per_second,
                        help="enrolments a second with one token (more are answered 429)")
    parser.add_argument("--enrol-per-address-day", type=int, default=defaults.enrol_limits.per_address_per_day,
                        help="enrolments a day from one client address (more are answered 429; 0: no daily cap)")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="an origin (https://app.example) whose browser pages may call the edge (repeatable; "
                             "none by default)")
    parser.add_argument("--tls-cert", type=Path, default=None, help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", type=Path, default=None, help="the certificate's private key (PEM)")
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    die_with_parent()
    act_as(service("edge").principal.name)
    cfg = Settings.from_env()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    Keyring.create(cfg.edge_key)
    config = EdgeConfig(cfg.bootstrap, cfg.redis, cfg.edge_key,
                        args.spool_dir or cfg.state_dir / "edge" / "spool" / str(args.port),
                        spool_bytes=args.spool_bytes, max_body_bytes=args.max_body_bytes,
                        max_inflated_bytes=4 * args.max_body_bytes, max_reports=args.max_reports,
                        rate_per_s=args.rate, linger_s=args.linger_ms / 1000,
                        delivery_timeout_ms=args.delivery_timeout_ms, idle_timeout_s=args.idle_timeout_s,
                        body_timeout_s=args.body_timeout_s, max_connections=args.max_connections,
                        pointer_key=cfg.pointer_signing_key, enrolment_keys=cfg.enrolment_trusted_keys,
                        enrol_limits=EnrolLimits(args.enrol_per_address, args.enrol_per_token,
                                                 args.enrol_per_address_day),
                        cors_origins=frozenset(args.cors_origin))
    try:
        serve(config, args.host, args.port, reuse_port=args.reuse_port, loop=args.loop,
              ssl_context=None if args.tls_cert is None else server_tls(args.tls_cert, args.tls_key))
    except (FileNotFoundError, CannotListen) as exc:  # no credentials yet (`ldp up` makes them), a certificate not
        unusable("ldpstream.edge", str(exc))  # there, the port taken: one line, and not started again


if __name__ == "__main__":
    main()
