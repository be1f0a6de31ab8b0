"""What the command line prints fits 80 columns without cutting a name (`ldp estimate`'s tables, `ldp status`), and
long work shows a progress bar with counts and the time left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from ldpstream.cli.output import estimates_table, plain_console, poisoning_table, progress
from ldpstream.contract.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOWHERE = {"KAFKA_BOOTSTRAP": "127.0.0.1:9", "REDIS_URL": "redis://127.0.0.1:9/0"}  # port 9 (discard): closed here


def demo_like_result() -> dict[str, Any]:
    """Estimates shaped like `ldp estimate`'s on the demo's collection (its real names, made-up figures)."""
    spec = load_spec(EXAMPLES / "diagnostics.yaml")
    attributes: dict[str, Any] = {}
    for a in spec.attributes:
        attributes[a.name] = ({"mean": -1234.5678, "stderr": 12.345} if a.type == "numeric" else
                              {"frequencies": {v: {"estimate": -0.0123456, "stderr": 0.00123} for v in a.values}})
    poisoning = {"source": "live", "reference": {"windows": 3, "reports": 150_000}, "set_aside": 12,
                 "set_aside_fraction": 0.0001, "alert_threshold": 0.01, "alert": False,
                 "attributes": {n: {"status": "clean", "set_aside": 12, "gain_removed": -631.123,
                                    "suspects": list(e.get("frequencies", {}))[:2], "estimate": e}
                                for n, e in attributes.items()}}
    return {"collection": f"{spec.name}-demo-20261201-215959", "version": 1, "window": "all", "reports": 50_000,
            "attributes": attributes, "poisoning": poisoning}


def rendered(table: Table) -> str:
    console = plain_console(width=80)
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def test_the_estimate_tables_fit_80_columns_with_every_name_whole() -> None:
    result = demo_like_result()
    truth = {n: {"mean": 1.0} if "mean" in e else {"frequencies": dict.fromkeys(e["frequencies"], 0.1)}
             for n, e in result["attributes"].items()}
    for table in (estimates_table(result), estimates_table(result, truth=truth), poisoning_table(result)):
        text = rendered(table)
        assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text, text
        words = set(text.split())
        assert set(result["attributes"]) <= words, text
        assert {"-1235", "12.35"} <= words or {"-631.1"} <= words, text  # figures whole


def test_status_fits_80_columns_with_its_addresses_whole(tmp_path: Path) -> None:
    env = {**os.environ, **NOWHERE, "COLUMNS": "80", "LDP_STATE_DIR": str(tmp_path)}
    answer = subprocess.run([sys.executable, "-m", "ldpstream", "status"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert answer.returncode == 1  # nothing answers there
    lines = answer.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in answer.stdout, answer.stdout
    assert "redis://127.0.0.1:9/0" in answer.stdout and "127.0.0.1:9 " in answer.stdout


def test_the_wide_console_takes_columns_from_the_environment() -> None:
    code = "from ldpstream.cli.output import wide; print(wide.width)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "80"}).stdout
    assert out.strip() == "80"


def test_a_progress_bar_shows_counts_and_the_time_left() -> None:
    console = plain_console(width=120, force_terminal=True)
    with console.capture() as captured, progress(console) as shown:
        task = shown.add_task("reports sent through the edge", total=50_000)
        shown.update(task, completed=12_500)
        shown.refresh()
    text = captured.get()
    assert "reports sent through the edge" in text and "12500/50000" in text and "left" in text, text
