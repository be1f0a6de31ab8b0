"""`ldp heavy-hitters run`: perturb a file of strings (one device per line) and decode the heavy hitters, in process.

JSON contract (`--json`): {"mechanism", "epsilon", "devices", "levels" (a tree's prefix lengths; SFP's fragment
offsets), "top": [{"item", "estimate", "stderr"}], "seconds"}: the decoded top list, largest estimate first, each
frequency estimate (a fraction of the devices) with its standard error; `seconds` covers perturbing, accumulating
and decoding (not reading the file).
"""

from __future__ import annotations

import string
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ldpstream.cli.output import console, fail, print_fields
from ldpstream.mechanisms import registry

if TYPE_CHECKING:
    import numpy as np

    from ldpstream.mechanisms.open_domain import StringDomain

heavy_hitters_app = typer.Typer(no_args_is_help=True, add_completion=False,
                                help="Heavy hitters of strings over an open domain.")
_TEXT = set(string.printable) - set("\t\n\r\x0b\x0c")


def read_items(path: Path) -> np.ndarray:
    """The file's lines as bytes (S dtype), without their line ends; LDPError for an empty file or line."""
    import numpy as np

    from ldpstream.mechanisms.base import LDPError

    lines = path.read_bytes().splitlines()
    if not lines:
        raise LDPError(f"{path}: no items")
    if not all(lines):
        raise LDPError(f"{path}: line {lines.index(b'') + 1} is empty")
    return np.array(lines, dtype=bytes)


def domain_for(items: np.ndarray, max_length: int | None, alphabet: str | None) -> StringDomain:
    """The declared domain, or the items' own: their longest length, and their characters if all printable."""
    import numpy as np

    from ldpstream.mechanisms.open_domain import StringDomain

    length = int(np.char.str_len(items).max()) if max_length is None else max_length
    if alphabet is None:
        present = np.unique(np.frombuffer(items.tobytes(), dtype=np.uint8))
        chars = {chr(b) for b in present if b}
        alphabet = "".join(sorted(chars)) if chars <= _TEXT else None
    return StringDomain(length, alphabet or None)


@heavy_hitters_app.command("run")
def run(
    items: Path = typer.Option(..., "--items", exists=True, dir_okay=False, help="one item per line, one device each"),
    epsilon: float = typer.Option(..., "--epsilon", "-e", help="privacy budget per device"),
    top: int = typer.Option(20, "--top", "-k", help="how many heavy hitters"),
    mechanism: str = typer.Option("auto", "--mechanism", "-m", help=f"auto or one of {list(registry.HEAVY_HITTERS)}"),
    seed: int = typer.Option(0, "--seed", help="seeds the public hashes and the devices' noise"),
    max_length: int = typer.Option(None, "--max-length", help="bytes per string (default: the longest item)"),
    alphabet: str = typer.Option(None, "--alphabet", help="allowed characters (default: the items' own, or bytes)"),
    step: int = typer.Option(None, "--step",
                             help="bytes per tree level (default: extensions <= 1024) or per SFP fragment (default 2)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Perturb every item as one device would, accumulate the reports and decode the top heavy hitters."""
    import numpy as np

    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.open_domain import SFP, PrefixTree
    from ldpstream.mechanisms.open_domain.tree import choose_heavy_hitters

    try:
        values = read_items(items)
        domain = domain_for(values, max_length, alphabet)
        name = choose_heavy_hitters(epsilon) if mechanism == "auto" else mechanism
        if name not in registry.HEAVY_HITTERS:
            raise LDPError(f"unknown heavy-hitter mechanism {name!r}; known: auto, {list(registry.HEAVY_HITTERS)}")
        cls = registry.open_domain_class(name)
        tree = cls(epsilon, domain, seed=seed, step=step, top=top)  # type: ignore[call-arg]
        assert isinstance(tree, (PrefixTree, SFP))
        rows = domain.encode(values)
        start = time.perf_counter()
        found = tree.heavy_hitters(tree.accumulate(tree.perturb(rows, np.random.default_rng(seed))))
        seconds = time.perf_counter() - start
    except LDPError as exc:
        fail(str(exc), code=2)
    levels = tree.positions if isinstance(tree, SFP) else tree.lengths
    hitters = found.to_rows()
    payload = {"mechanism": name, "epsilon": epsilon, "devices": int(rows.shape[0]), "levels": list(levels),
               "top": hitters, "seconds": round(seconds, 4)}
    if as_json:
        print_fields(payload, as_json=True)
        return
    table = Table("rank", "item", "estimate", "stderr",
                  title=f"{name}, eps={epsilon:g}: {rows.shape[0]:,} devices, {seconds:.2f} s")
    for rank, row in enumerate(hitters, start=1):
        table.add_row(str(rank), repr(row["item"]), f"{row['estimate']:.4g}", f"{row['stderr']:.2g}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add `ldp heavy-hitters ...` to the `ldp` app."""
    app.add_typer(heavy_hitters_app, name="heavy-hitters")
