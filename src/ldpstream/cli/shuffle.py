"""`ldp shuffle`: the shuffler in the foreground (`ldpstream.shuffler`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ldpstream.cli.errors import client_logs, require_services


def shuffle(margin_s: Annotated[float, typer.Option(help="after a window's end and grace, how long reports the edge "
                                                           "admitted may take to reach Kafka")] = 5.0,
            memory_rows: Annotated[int, typer.Option(min=1000, help="rows of a window held in memory before it "
                                                                    "spills to disk")] = 5_000_000,
            spill_dir: Annotated[Path | None, typer.Option(help="where windows larger than memory spill")] = None,
            metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus metrics here (held reports, "
                                                                   "released batches)")] = None,
            ) -> None:
    """Shuffle the reports of shuffled collections window by window until SIGINT/SIGTERM (each window released once,
    in a Kafka transaction)."""
    import logging
    import signal
    import threading

    from ldpstream.runtime import metrics
    from ldpstream.runtime.access import act_as
    from ldpstream.runtime.catalog import service
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.supervisor import STOP_GRACE_S, die_with_parent, exit_within
    from ldpstream.shuffler.service import ShufflerConfig, run

    die_with_parent()  # when a supervisor started it (`ldpstream.runtime.supervisor.start`)
    require_services()
    act_as(service("shuffler").principal.name)
    cfg = Settings.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    client_logs(verbose=True)
    if metrics_port is not None:
        metrics.serve(metrics_port, cfg, service("shuffler"))
    stop = threading.Event()

    def stopping(*_: object) -> None:
        exit_within(STOP_GRACE_S)  # a stop that hangs on Kafka or Redis gone is cut short: a window's release is
        stop.set()  # one Kafka transaction, aborted if it was not committed

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stopping)
    run(ShufflerConfig(cfg.bootstrap, cfg.redis, margin_s=margin_s, memory_rows=memory_rows, spill_dir=spill_dir),
        stop)


def register(app: typer.Typer) -> None:
    """Add `ldp shuffle`."""
    app.command()(shuffle)
