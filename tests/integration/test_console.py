"""The console that `ldp serve` serves, in a real headless Chromium over a running stack: a worker aggregates a
fleet's reports from the real Kafka into the real Redis, window after window (5 s windows), while `ldp serve` runs
as its own process. The catalogue lists the collection with its attributes' descriptions and units; the collection's
page draws each attribute's series with its band and a histogram, as panels of a grid, shows the newest windows'
figures from the API, marks a window still open as partial, says its times are UTC, shows the range picked (the last
windows, a preset, from/to), and picks up a new window by itself; an unknown collection's page says so and points to
the nearest published names. A collection with a Square Wave attribute (examples/request_latency.yaml) has its
distribution drawn (density, CDF, quantile marks) from the distribution route, refreshed live too. A training job's page
draws its held-out accuracy and loss per model version from `/jobs/{job}` and lists its updates by outcome; the
catalogue lists the job; an unknown job's page and a job no coordinator runs yet say so. No page logs an error or a
warning; screenshots are kept in artifacts/console/ (git-ignored) and in the test's tmp dir."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chromium import Page, chromium_page

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.store import RedisStore
from ldpstream.cli.demo import free_port
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.runtime.jobs import publish_job
from ldpstream.runtime.kafka import ReportProducer, delete_topic
from ldpstream.runtime.process import stop_pid
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.tokens import Scope
from ldpstream.simulator.simulator import simulate
from tests.readapi.job_support import ACCEPTED, REFUSED, VERSIONS, TrainedJob, tiny_job, trained_job
from tests.tokens import api_tokens

WINDOW_S = 5
DEVICES = 400  # per window
ARTIFACTS = PROJECT_ROOT / "artifacts" / "console"


class Stack:
    """A published collection with 5 s windows, a worker aggregating it, and `ldp serve` on a free port."""

    def __init__(self, cfg: Settings, spec: CollectionSpec, url: str, token: str) -> None:
        self.cfg, self.spec, self.url, self.token = cfg, spec, url, token
        self.store = RedisStore(cfg.redis)
        self.rounds = 0

    def send_window(self) -> None:
        """One window's reports (a fresh fleet of DEVICES, stamped now), waited for until all are counted."""
        target = (self.rounds + 1) * DEVICES
        simulate(self.spec, DEVICES, ReportProducer(self.cfg.bootstrap), seed=self.rounds + 1)
        self.rounds += 1
        deadline = time.monotonic() + 60
        while self.store.outcomes(self.spec.name).get("accepted", 0) < target:
            assert time.monotonic() < deadline, f"the worker counted {self.store.outcomes(self.spec.name)}"
            time.sleep(0.2)

    def api(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)


@pytest.fixture
def stack(live_services: Settings, tmp_path: Path) -> Iterator[Stack]:
    with running_stack(live_services, tmp_path, "diagnostics.yaml") as running:
        yield running


@pytest.fixture
def jobs(live_services: Settings) -> Iterator[tuple[TrainedJob, str]]:
    """A training job its coordinator ran to version 2 (tests/readapi/job_support.py), and one published that no
    coordinator runs."""
    idle = tiny_job()
    publish_job(idle, live_services.bootstrap)
    with trained_job(live_services) as trained:
        yield trained, idle.job_id


@pytest.fixture
def latency_stack(live_services: Settings, tmp_path: Path) -> Iterator[Stack]:
    with running_stack(live_services, tmp_path, "request_latency.yaml") as running:
        yield running


@contextmanager
def running_stack(live_services: Settings, tmp_path: Path, example: str) -> Iterator[Stack]:
    """examples/<example> published under a test name with 5 s and 1 h windows, a worker, and `ldp serve`."""
    spec = load_spec(PROJECT_ROOT / "examples" / example).replace(
        name=f"it-console-{uuid.uuid4().hex[:8]}", windows=[f"{WINDOW_S}s", "1h"])
    publish_spec(spec, live_services.bootstrap)
    env = {"KAFKA_BOOTSTRAP": live_services.bootstrap, "REDIS_URL": live_services.redis}
    worker = start_worker(f"ldp-aggregator-{spec.name}", log_file=tmp_path / "worker.log", env=env)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "ldpstream", "serve", "--port", str(port)],
                              stdout=(tmp_path / "serve.log").open("wb"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        with api_tokens(live_services.redis) as tokens:
            stack = Stack(live_services, spec, f"http://127.0.0.1:{port}", tokens.issue([Scope.READ]).token)
            deadline = time.monotonic() + 60
            while True:
                try:
                    stack.api("/collections")
                    break
                except OSError:
                    assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "serve.log").read_text()
                    time.sleep(0.2)
            yield stack
    finally:
        stop_pid(server.pid)
        stop_worker(worker)
        RedisStore(live_services.redis).delete_collection(spec.name)
        delete_topic(live_services.bootstrap, spec.topic)


async def shot(page: Page, name: str, tmp_path: Path) -> None:
    """A screenshot in the test's tmp dir and in artifacts/console/."""
    path = await page.screenshot(tmp_path / f"{name}.png")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.png").write_bytes(path.read_bytes())
    assert path.stat().st_size > 10_000  # a page drawn, not a blank one


async def scenario(stack: Stack, jobs: tuple[TrainedJob, str], tmp_path: Path) -> None:
    for _ in range(3):  # three windows of reports, WINDOW_S apart
        started = time.monotonic()
        await asyncio.to_thread(stack.send_window)
        await asyncio.sleep(max(0.0, WINDOW_S - (time.monotonic() - started)))
    async with chromium_page(tmp_path / "profile") as page:
        await page.navigate(f"{stack.url}/console/#token={stack.token}")
        await page.wait_for("document.body.dataset.ready === '1'")
        card = f"document.querySelector('[data-collection=\"{stack.spec.name}\"]')"
        text = await page.evaluate(f"{card}.innerText")
        assert "Charge left" in text and "°C" in text and "MiB" in text and "Connection in use" in text
        assert await page.evaluate("location.hash") == ""  # the token left the address bar
        await shot(page, "catalogue", tmp_path)

        await page.navigate(f"{stack.url}/console/collection?name={stack.spec.name}")
        await page.wait_for("document.body.dataset.ready === '1'")
        points = await page.evaluate("window.ldpConsole.points")
        assert set(points) == {a.name for a in stack.spec.attributes}
        assert all(n >= 3 for n in points.values()), points
        assert await page.evaluate("document.querySelectorAll('.chart canvas').length") >= len(points)
        shown = await page.evaluate("window.ldpConsole.series.battery_level")
        newest = shown["windows"][-1]
        api = stack.api(f"/collections/{stack.spec.name}/series?attribute=battery_level&window={WINDOW_S}s"
                        f"&from={newest['start_ms']}&to={newest['end_ms']}")
        assert api["windows"] == [newest]  # the page shows the API's figures
        assert newest["reports"] == DEVICES and newest["estimates"]["mean"]["low"] is not None
        bars = await page.evaluate("[...document.querySelectorAll('[data-attribute=\"network_type\"] .bar-row')]"
                                   ".map(r => r.dataset.label)")
        assert bars == ["wifi", "5g", "4g", "3g", "offline"]
        await check_layout(page)
        await shot(page, "collection", tmp_path)

        refreshes = await page.evaluate("window.ldpConsole.refreshes")
        await asyncio.to_thread(stack.send_window)  # a fourth window: the page draws it by itself
        await page.wait_for(f"window.ldpConsole.refreshes > {refreshes} && "
                            "window.ldpConsole.points.battery_level >= 4", timeout_s=30)
        await check_range_picker(page, stack)
        assert page.problems() == []

        await page.navigate(f"{stack.url}/console/collection?name={stack.spec.name[:-1]}")
        await page.wait_for("document.body.dataset.ready === '1'")
        assert await page.evaluate("window.ldpConsole.missing") == stack.spec.name[:-1]
        text = await page.evaluate("document.getElementById('missing').innerText")
        assert f"No collection named \u201c{stack.spec.name[:-1]}\u201d" in text and "Did you mean" in text, text
        links = await page.evaluate("[...document.querySelectorAll('#missing .suggest a')].map(a => a.textContent)")
        assert links[0] == stack.spec.name
        assert await page.evaluate("document.getElementById('main').hidden") is True
        await shot(page, "missing", tmp_path)
        assert page.problems() == []
        await job_pages(page, stack, *jobs, tmp_path)


async def job_pages(page: Page, stack: Stack, trained: TrainedJob, idle: str, tmp_path: Path) -> None:
    """The catalogue lists the job; its page draws the API's curves and counts; unknown and idle jobs say so."""
    job = trained.spec.job_id
    await page.navigate(f"{stack.url}/console/")
    await page.wait_for("document.body.dataset.ready === '1'")
    card = await page.evaluate(f"document.querySelector('[data-job=\"{job}\"]').innerText")
    assert "privunitg" in card and f"{VERSIONS} of 5" in card, card

    await page.navigate(f"{stack.url}/console/job?name={job}")
    await page.wait_for("document.body.dataset.ready === '1'")
    assert await page.evaluate("window.ldpConsole.points") == {"accuracy": VERSIONS, "loss": VERSIONS}
    assert await page.evaluate("document.querySelectorAll('#curves canvas').length") >= 2
    assert await page.evaluate("window.ldpConsole.job") == stack.api(f"/jobs/{job}")  # the API's figures
    rows = await page.evaluate("Object.fromEntries([...document.querySelectorAll('#updates tr[data-outcome]')]"
                               ".map(r => [r.dataset.outcome, r.cells[1].textContent]))")
    assert rows == {"accepted": str(ACCEPTED), **{f"refused:{k}": str(n) for k, n in REFUSED.items()}}
    facts = await page.evaluate("document.getElementById('facts').innerText")
    assert "lifetime eps" in facts and "eps per report" in facts and "held-out accuracy" in facts, facts
    await shot(page, "job", tmp_path)

    for name, says in ((job[:-1], "Did you mean"), (idle, "but no coordinator has run it yet: ldp train run")):
        await page.navigate(f"{stack.url}/console/job?name={name}")
        await page.wait_for("document.body.dataset.ready === '1'")
        text = await page.evaluate("document.getElementById('missing').innerText")
        assert says in text and await page.evaluate("window.ldpConsole.missing") == name, text
    assert page.problems() == []


async def check_layout(page: Page) -> None:
    """Panels side by side; times said to be UTC; the windows still open when drawn marked partial, no other."""
    tops = await page.evaluate("[...document.querySelectorAll('#attributes > .card')].map(c => c.offsetTop)")
    assert len(tops) >= 2 and tops[0] == tops[1], tops  # a grid at 1280 px: the first two panels share a row
    assert "UTC" in await page.evaluate("document.getElementById('timezone').textContent")
    assert "(UTC)" in await page.evaluate("document.getElementById('status').textContent")
    assert not {"AM", "PM"} & set((await page.evaluate("document.body.innerText")).split())
    drawn = await page.evaluate("window.ldpConsole.renderedAt")
    for name, doc in (await page.evaluate("window.ldpConsole.series")).items():
        open_windows = [w["start_ms"] for w in doc["windows"] if w["end_ms"] > drawn]
        assert await page.evaluate(f"window.ldpConsole.partial[{json.dumps(name)}]") == open_windows
    notes = await page.evaluate("[...document.querySelectorAll('.partial-note')].map(n => [n.hidden, n.textContent])")
    assert all(hidden == (text == "") for hidden, text in notes), notes
    assert all("partial" in text for hidden, text in notes if not hidden)


async def choose_range(page: Page, value: str) -> None:
    await page.evaluate(f"(() => {{ const r = document.getElementById('range'); r.value = {json.dumps(value)}; "
                        "r.dispatchEvent(new Event('change')); return true; })()")


async def check_range_picker(page: Page, stack: Stack) -> None:
    """A preset: the windows of the last 15 minutes; from/to (UTC): exactly the windows that start in it."""
    refreshes = await page.evaluate("window.ldpConsole.refreshes")
    await choose_range(page, "15m")
    await page.wait_for(f"window.ldpConsole.refreshes > {refreshes}")
    picked = await page.evaluate("window.ldpConsole.range")
    assert 900_000 <= picked["to"] - picked["from"] <= 900_000 + WINDOW_S * 1000 + 1
    shown = await page.evaluate("window.ldpConsole.series.battery_level.windows")
    second = shown[1]["start_ms"]  # from the second window on: the first one drops out
    refreshes = await page.evaluate("window.ldpConsole.refreshes")
    await choose_range(page, "custom")
    await page.wait_for(f"window.ldpConsole.refreshes > {refreshes}")
    assert await page.evaluate("document.getElementById('custom').hidden") is False
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second / 1000))
    refreshes = await page.evaluate("window.ldpConsole.refreshes")
    await page.evaluate(f"document.getElementById('from').value = {json.dumps(start)}; "
                        "document.getElementById('apply').click(); true")
    await page.wait_for(f"window.ldpConsole.refreshes > {refreshes}")
    assert (await page.evaluate("window.ldpConsole.range"))["from"] == second
    starts = await page.evaluate("window.ldpConsole.series.battery_level.windows.map(w => w.start_ms)")
    assert starts and starts[0] == second and len(starts) == len(shown) - 1


def test_the_console_shows_a_running_stack_live_in_chromium(jobs: tuple[TrainedJob, str], stack: Stack,
                                                           tmp_path: Path) -> None:
    asyncio.run(scenario(stack, jobs, tmp_path))


async def distribution_scenario(stack: Stack, tmp_path: Path) -> None:
    for _ in range(2):
        started = time.monotonic()
        await asyncio.to_thread(stack.send_window)
        await asyncio.sleep(max(0.0, WINDOW_S - (time.monotonic() - started)))
    await asyncio.to_thread(stack.send_window)  # the newest window: the one whose distribution is drawn
    async with chromium_page(tmp_path / "profile") as page:
        await page.navigate(f"{stack.url}/console/collection?name={stack.spec.name}#token={stack.token}")
        await page.wait_for("document.body.dataset.ready === '1'")
        shown = await page.evaluate("window.ldpConsole.distributions.request_ms")
        assert shown["distribution"] is not None and shown["window"].startswith(f"{WINDOW_S}s:")
        api = stack.api(f"/collections/{stack.spec.name}/distribution?attribute=request_ms&window={shown['window']}"
                        "&quantiles=0.5,0.9,0.99")
        assert shown == api  # the page draws the API's figures
        assert set(shown["distribution"]["quantiles"]) == {"0.5", "0.9", "0.99"}
        box = "document.querySelector('[data-attribute=\"request_ms\"] .distribution')"
        assert await page.evaluate(f"{box}.querySelectorAll('canvas').length") >= 1
        note = await page.evaluate(f"{box}.querySelector('.note').textContent")
        assert "median" in note and "90%" in note and "99%" in note and "sw-ems" in note, note
        legend = await page.evaluate(f"[...{box}.querySelectorAll('.u-legend .u-series:not([hidden]) .u-label')]"
                                     ".map(e => e.textContent)")
        assert legend[1:] == ["density", "CDF"], legend
        # the categorical attribute has no distribution; the numeric one keeps its series
        assert await page.evaluate("document.querySelector('[data-attribute=\"network_type\"] .distribution')") \
            is None
        assert await page.evaluate("window.ldpConsole.points.request_ms") >= 3
        await page.evaluate(f"{box}.scrollIntoView(); true")
        await shot(page, "distribution", tmp_path)

        refreshes = await page.evaluate("window.ldpConsole.refreshes")
        await asyncio.sleep(max(0.0, WINDOW_S - time.time() % WINDOW_S) + 0.2)  # into the next window
        await asyncio.to_thread(stack.send_window)
        await page.wait_for(f"window.ldpConsole.refreshes > {refreshes} && "
                            f"window.ldpConsole.distributions.request_ms.window !== {json.dumps(shown['window'])}",
                            timeout_s=30)
        assert page.problems() == []


def test_the_console_draws_a_numeric_distribution_live_in_chromium(latency_stack: Stack, tmp_path: Path) -> None:
    asyncio.run(distribution_scenario(latency_stack, tmp_path))


def test_the_console_asks_for_a_token_and_says_when_it_is_refused(live_services: Settings, tmp_path: Path) -> None:
    async def run() -> None:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "ldpstream", "serve", "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            async with chromium_page(tmp_path / "profile") as page:
                url = f"http://127.0.0.1:{port}/console/"
                deadline = time.monotonic() + 60
                while True:
                    await page.navigate(url)
                    if await page.wait_for("document.readyState === 'complete' && document.title", 10):
                        if await page.evaluate("!!document.getElementById('login')"):
                            break
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.3)
                assert await page.evaluate("!document.getElementById('login').hidden")
                assert page.problems() == []  # nothing asked without a token
                await page.evaluate("document.getElementById('token').value = 'ldp_wrong_token'; "
                                    "document.getElementById('login').requestSubmit(); true")
                message = await page.wait_for("document.body.dataset.ready !== '1' && "
                                              "document.getElementById('status').textContent")
                assert "The token was refused (401)" in message
        finally:
            stop_pid(server.pid)

    asyncio.run(run())


def test_the_driver_sees_what_a_page_reports_as_wrong(tmp_path: Path) -> None:
    """The check `page.problems() == []` above is not empty-handed: an error, a warning, an uncaught exception and a
    failed load are all seen."""
    async def run() -> list[str]:
        async with chromium_page(tmp_path / "profile") as page:
            await page.navigate("data:text/html,<img src='http://127.0.0.1:9/missing.png'><script>console.error('e');"
                                "console.warn('w');setTimeout(() => { throw new Error('boom'); });</script>")
            await page.wait_for("document.readyState === 'complete'")
            await asyncio.sleep(1.0)
            return page.problems()

    problems = asyncio.run(run())
    assert any("console.error: ['e']" in p for p in problems) and any("console.warning" in p for p in problems)
    assert any("boom" in p for p in problems) and any("log error" in p for p in problems), problems
