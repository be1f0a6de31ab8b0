"""The built docs site (`make docs`) makes no third-party request and ships no bytecode: built once here with the
interpreter writing bytecode (as `make` runs it), then its pages opened in headless Chromium, every request the
browser makes recorded, and its HTML and CSS read for any resource on another origin."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ldpstream.runtime.settings import PROJECT_ROOT
from tests.integration.chromium import chromium_page

PAGES = ("index.html", "reference/cli/index.html", "tutorials/web-page/index.html", "404.html")
# a resource the page loads (not a link the reader may follow): <link href> but rel=canonical/alternate, src=, url()
RESOURCES = (re.compile(r"<link\b(?![^>]*rel=\"?(?:canonical|alternate)\b)[^>]*\bhref=\"(https?:)?//", re.I),
             re.compile(r"\bsrc=\"(https?:)?//", re.I), re.compile(r"url\(\s*['\"]?(https?:)?//", re.I),
             re.compile(r"@import\s+['\"]?(https?:)?//", re.I))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['mkdocs'] + sys.argv[1:]; "
                    "runpy.run_module('mkdocs', run_name='__main__')", "build", "--strict", "--quiet", "-d", str(out)],
                   cwd=PROJECT_ROOT, env={**env, "NO_MKDOCS_2_WARNING": "1"}, check=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_ships_no_bytecode(site: Path) -> None:
    assert not [p for p in site.rglob("*") if p.suffix == ".pyc" or p.name == "__pycache__"]


def test_no_page_or_stylesheet_loads_a_resource_from_another_origin(site: Path) -> None:
    found = [f"{path.relative_to(site)}: {m.group(0)}" for path in site.rglob("*")
             if path.suffix in (".html", ".css") for pattern in RESOURCES
             for m in pattern.finditer(path.read_text(errors="replace"))]
    assert not found, found[:10]


async def requests_of(base: str, profile: Path) -> list[str]:
    async with chromium_page(profile) as page:
        await page.send("Network.enable")
        for name in PAGES:
            await page.navigate(f"{base}/{name}")
            await page.wait_for("document.readyState === 'complete' && document.querySelector('.md-content') !== null")
            await asyncio.sleep(1.0)  # what the theme's scripts fetch after the load
        return [e["params"]["request"]["url"] for e in page.events if e["method"] == "Network.requestWillBeSent"]


def test_chromium_makes_no_third_party_request_on_the_site(served: str, tmp_path: Path) -> None:
    urls = asyncio.run(requests_of(served, tmp_path / "profile"))
    assert any(u.startswith(f"{served}/") for u in urls)
    assert [u for u in urls if not u.startswith((f"{served}/", "data:", "blob:"))] == []
