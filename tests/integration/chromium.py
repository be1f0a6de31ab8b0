"""A headless Chromium (Debian's package) driven over the Chrome DevTools Protocol with aiohttp's websocket client:
open a page, evaluate JavaScript in it, wait for a condition, take a screenshot, and collect what the page reported
as errors (console errors and warnings, uncaught exceptions, failed loads and CSP violations from the browser log).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from ldpstream.runtime.process import stop_pid

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
START_TIMEOUT_S = 30.0


class PageError(Exception):
    """A DevTools command failed, or a condition was not met in time."""


class Page:
    """One tab, attached over a flat DevTools session."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.session: str | None = None
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        """The result of a DevTools command (on the page's session unless `session` is False)."""
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session and self.session is not None:
            message["sessionId"] = self.session
        await self.ws.send_str(json.dumps(message))
        answer = await asyncio.wait_for(future, 60)
        if "error" in answer:
            raise PageError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    async def open(self, width: int = 1280, height: int = 900) -> None:
        """A new tab, attached, with the runtime, the log and page events on."""
        target = await self.send("Target.createTarget", session=False, url="about:blank")
        attached = await self.send("Target.attachToTarget", session=False, targetId=target["targetId"], flatten=True)
        self.session = attached["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            await self.send(domain)
        await self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                        mobile=False)

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise PageError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll until the expression is truthy; its value (PageError with the page's problems if it never is)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(PageError):
                value = await self.evaluate(expression)
                if value:
                    return value
            await asyncio.sleep(0.2)
        raise PageError(f"not true within {timeout_s} s: {expression}; the page's problems: {self.problems()}")

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page at `path`."""
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                               clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def problems(self) -> list[str]:
        """Whatever the page reported as wrong: console errors and warnings, uncaught exceptions, browser log
        errors and warnings (failed loads, CSP violations)."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                args = [a.get("value", a.get("description")) for a in params["args"]]
                found.append(f"console.{params['type']}: {args}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"exception: {details.get('exception', {}).get('description', details.get('text'))}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                entry = params["entry"]
                found.append(f"log {entry['level']} ({entry.get('source')}): {entry['text']} {entry.get('url', '')}")
        return found


@contextlib.asynccontextmanager
async def chromium_page(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with its profile in `profile` (an empty folder) and one tab, closed at the end."""
    if CHROMIUM is None:
        raise RuntimeError("no chromium on PATH: `apt-get install -y chromium` (make install-test does it)")
    process = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                                "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"chromium did not open its DevTools port (exit status {process.poll()})")
            await asyncio.sleep(0.1)
        port, path = active.read_text().splitlines()[:2]
        async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}{path}",
                                                                    max_msg_size=0) as ws:
            page = Page(ws)
            try:
                await page.open()
                yield page
            finally:
                page.reader.cancel()
    finally:
        stop_pid(process.pid, timeout_s=10)  # its process group: the browser and its renderers
        process.wait(10)
