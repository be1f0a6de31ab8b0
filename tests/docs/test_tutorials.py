"""The web tutorial's commands (docs/tutorials/web-page.md) fit together and with the defaults: its page is served on
a port of its own (not the read API's default, `ldp serve`'s 8000, nor its edge's), and the edge allows exactly that
page's origin."""

from __future__ import annotations

import re

from ldpstream.cli.commands import COMMANDS, module_commands
from ldpstream.runtime.settings import PROJECT_ROOT


def test_the_web_tutorial_serves_its_page_on_its_own_port_and_allows_its_origin() -> None:
    text = (PROJECT_ROOT / "docs" / "tutorials" / "web-page.md").read_text()
    page = int(re.search(r"http\.server (\d+)", text).group(1))  # type: ignore[union-attr]
    edge = int(re.search(r"ldp edge --port (\d+)", text).group(1))  # type: ignore[union-attr]
    serve = module_commands(COMMANDS["serve"][0])["serve"]
    api_port = next(p.default for p in serve.params if p.name == "port")
    assert page not in (api_port, edge)
    assert f"--cors-origin http://127.0.0.1:{page} " in text
    assert f'echo "http://127.0.0.1:{page}/examples/web/' in text
