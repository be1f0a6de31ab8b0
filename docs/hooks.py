"""mkdocs hooks: the command-line reference, generated from the `ldp` app itself (every command and subcommand,
its help and its options), so the docs cannot drift from the code."""

from __future__ import annotations

from typing import Any

import click

MARKER = "<!-- ldp commands -->"


def _options(command: click.Command) -> list[str]:
    rows = ["| option | help |", "| --- | --- |"]
    for param in command.params:
        if isinstance(param, click.Argument):
            rows.append(f"| `{param.human_readable_name}` (argument) | |")
            continue
        if not isinstance(param, click.Option) or param.hidden:
            continue
        names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
        default = "" if param.default in (None, False, ()) or param.is_flag else f" (default: `{param.default}`)"
        rows.append(f"| {names} | {(param.help or '').replace('|', '/')}{default} |")
    return rows if len(rows) > 2 else []


def _command(path: str, command: click.Command) -> list[str]:
    out = [f"### `{path}`", "", (command.help or command.short_help or "").strip(), ""]
    out += _options(command)
    out.append("")
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            out += _command(f"{path} {name}", command.commands[name])
    return out


def cli_reference() -> str:
    """Markdown for every `ldp` command (the lazy table's modules imported one by one)."""
    from ldpstream.cli.commands import COMMANDS, module_commands

    out: list[str] = []
    for name in sorted(COMMANDS):
        out += _command(f"ldp {name}", module_commands(COMMANDS[name][0])[name])
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown
