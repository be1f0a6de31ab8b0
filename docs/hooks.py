"""mkdocs hooks: the command-line reference, generated from the `ldp` app itself (every command and subcommand,
its help and its options), and the layer map, rendered from the table `tests/test_layers.py` enforces
(`tests/layers.json`), so the docs cannot drift from the code; and a site that makes no third-party request
(a privacy project's docs tell no font server or code host who reads them) and ships no bytecode.

typer builds its commands from its own copy of click (`typer.core`), not from the `click` package: the walk below
checks against typer's classes, and anything it does not know is an error, never a silent omission
(tests/docs/test_cli_reference.py checks every command and option of the app is on the page).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

MARKER = "<!-- ldp commands -->"
LAYERS_MARKER = "<!-- ldp layers -->"
ROOT = f"{Path(__file__).resolve().parents[1]}/"  # a default path inside the checkout is shown relative to it
LAYERS = Path(ROOT) / "tests" / "layers.json"


def _cell(text: str) -> str:
    """Text for one table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _options(command: TyperCommand | TyperGroup) -> list[str]:
    rows = ["| option | help |", "| --- | --- |"]
    for param in command.params:
        if isinstance(param, TyperArgument):
            rows.append(f"| `{param.human_readable_name}` (argument) | {_cell(param.help or '')} |")
        elif isinstance(param, TyperOption):
            if param.hidden:
                continue
            names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
            default = ("" if param.default in (None, False, ()) or param.is_flag
                       else f" (default: `{str(param.default).replace(ROOT, '')}`)")
            rows.append(f"| {names} | {_cell(param.help or '')}{default} |")
        else:
            raise TypeError(f"{command.name}: a parameter of an unknown kind {type(param).__name__}")
    return rows if len(rows) > 2 else []


def _command(path: str, command: Any) -> list[str]:
    if not isinstance(command, TyperCommand | TyperGroup):
        raise TypeError(f"{path}: not a typer command ({type(command).__name__})")
    out = [f"### `{path}`", "", (command.help or command.short_help or "").strip(), ""]
    out += _options(command)
    out.append("")
    if isinstance(command, TyperGroup):
        for name in sorted(command.commands):
            if not command.commands[name].hidden:
                out += _command(f"{path} {name}", command.commands[name])
    return out


def cli_reference() -> str:
    """Markdown for every `ldp` command (the lazy table's modules imported one by one)."""
    from ldpstream.cli.commands import COMMANDS, module_commands

    out: list[str] = []
    for name in sorted(COMMANDS):
        out += _command(f"ldp {name}", module_commands(COMMANDS[name][0])[name])
    return "\n".join(out)


def layer_map() -> str:
    """Markdown for the layers of `ldpstream`, top floor first: a diagram of the floors, then a row per package."""
    layers = json.loads(LAYERS.read_text())["layers"]
    floors = sorted({entry["floor"] for entry in layers}, reverse=True)
    names = {floor: [e["package"] for e in layers if e["floor"] == floor] for floor in floors}
    diagram = "\n  |\n".join(f" {'  '.join(names[floor])}" for floor in floors)
    rows = ["| floor | package | what |", "| --- | --- | --- |"]
    rows += [f"| {e['floor']} | `src/ldpstream/{e['package']}{'.py' if e['package'] == 'client' else '/'}` "
             f"| {_cell(e['what'])} |" for floor in floors for e in layers if e["floor"] == floor]
    return "\n".join(["```", diagram, "```", "", *rows])


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if LAYERS_MARKER in markdown:
        markdown = markdown.replace(LAYERS_MARKER, layer_map())
    return markdown


def on_config(config: Any, **_: Any) -> Any:
    """The theme's fonts off: mkdocs-material would load Roboto from fonts.googleapis.com on every page; the pages use
    the system's fonts instead."""
    config.theme["font"] = False
    return config


def on_files(files: Any, **_: Any) -> Any:
    """Everything but the bytecode Python left beside this hook (docs/__pycache__/hooks.*.pyc)."""
    for file in [f for f in files if "__pycache__" in f.src_uri.split("/") or f.src_uri.endswith(".pyc")]:
        files.remove(file)
    return files


def on_post_page(output: str, **_: Any) -> str:
    """The repository link as a plain link: mkdocs-material's "source" component would fetch the repository's stars,
    forks and latest release from api.github.com on every page."""
    return output.replace(' data-md-component="source"', "")


def on_post_template(output: str, **_: Any) -> str:
    """The same for the pages rendered from a template alone (404.html)."""
    return on_post_page(output)
