"""The docs' command-line reference (docs/hooks.py) lists every command and subcommand of the real `ldp` app, with
every option, and a help text's brackets survive."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ldpstream.cli.commands import COMMANDS, module_commands

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks.py"


@pytest.fixture(scope="module")
def page() -> str:
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.on_page_markdown(f"# CLI\n\n{hooks.MARKER}\n")  # type: ignore[no-any-return]


def walk(path: str, command: Any) -> Iterator[tuple[str, Any]]:
    """Every command under `command` (itself included), by its full path, whatever classes built it."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from walk(f"{path} {name}", sub)


def every_command() -> list[tuple[str, Any]]:
    return [pair for name in sorted(COMMANDS) for pair in walk(f"ldp {name}", module_commands(COMMANDS[name][0])[name])]


def test_every_command_has_its_section(page: str) -> None:
    missing = [path for path, _ in every_command() if f"### `{path}`\n" not in page]
    assert not missing, missing
    for path in ("ldp spec publish", "ldp tokens create", "ldp devices mint-token"):  # the ones the issue names
        assert f"### `{path}`\n" in page


def test_every_option_of_every_command_is_listed_in_its_section(page: str) -> None:
    missing = []
    for path, command in every_command():
        section = page.split(f"### `{path}`\n", 1)[1].split("\n### ", 1)[0]
        for param in command.params:
            names = param.opts if param.param_type_name == "option" else [param.human_readable_name]
            if not getattr(param, "hidden", False) and not all(f"`{n}`" in section for n in names):
                missing.append(f"{path} {'/'.join(names)}")
    assert not missing, missing


def test_a_help_text_keeps_its_brackets(page: str) -> None:
    assert "P[report 1 \\| permanent bit 0]" in page
