"""The web console that `ldp serve` serves beside the read API: a catalogue of every published collection and
training job, a page per collection with its live series (95% bands), histograms, and the distributions (density, CDF,
quantiles) of numeric attributes reported by a distribution mechanism, and a page per training job with its model
version, held-out accuracy and loss curves per version (95% bands), updates accepted and refused, and epsilon.

The pages and scripts are static files (`static/`, with uPlot vendored under its MIT licence) and hold no data, so
they are open; the scripts read `/collections`, `/collections/{name}/series`, `/collections/{name}/distribution`,
`/jobs` and `/jobs/{job}` with the bearer token the person gives them (pasted into the page, or in the address's
fragment `#token=...`, which browsers never send to a server; kept in the tab's sessionStorage), so the console needs
what the API needs: a token with scope `read`. No cookie is set, so no other site can make a browser act with it.
Every answer carries a Content-Security-Policy that allows this origin's scripts and styles only, and the scripts
write outside text into the page as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).with_name("static")
# the only files served, by the name in the address: (file under STATIC, content type)
FILES = {
    "console.js": ("console.js", "text/javascript"),
    "console.css": ("console.css", "text/css"),
    "uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "text/javascript"),
    "uPlot.min.css": ("vendor/uPlot.min.css", "text/css"),
    "uPlot.LICENSE": ("vendor/uPlot.LICENSE", "text/plain"),
}
PAGES = {"/console/": "index.html", "/console/collection": "collection.html", "/console/job": "job.html"}
CONSOLE_ROUTES = frozenset({"/", "/console", *PAGES, "/console/static/{file}"})
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def add_console(router: web.UrlDispatcher) -> None:
    """Add the console's routes: its pages, its static files, and redirects from / and /console."""
    router.add_get("/", to_console)
    router.add_get("/console", to_console)
    for path, name in PAGES.items():
        router.add_get(path, page(name))
    router.add_get("/console/static/{file}", static_file)


async def to_console(request: web.Request) -> web.Response:
    raise web.HTTPFound("/console/")


def page(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler that answers with one of the console's HTML pages."""
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / name).read_bytes(), content_type="text/html", charset="utf-8",
                            headers=HEADERS)
    return handler


async def static_file(request: web.Request) -> web.Response:
    """One of FILES (404 for any other name: nothing else under the package is reachable)."""
    found = FILES.get(request.match_info["file"])
    if found is None:
        raise web.HTTPNotFound()
    path, content_type = found
    return web.Response(body=(STATIC / path).read_bytes(), content_type=content_type, charset="utf-8",
                        headers=HEADERS)
