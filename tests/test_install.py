"""What `pip install` puts on a machine: one top-level import package, `ldpstream`; the base install is the device
SDK and brings nothing of the server stack; `ldpstream[server]` is the rest.

These build the wheel and install it into fresh virtual environments (packages from PyPI or pip's cache), so they
are marked `install`: `make test` runs them, `make check` does not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[1]
BASE = {"numpy", "msgspec", "pyyaml", "cryptography"}
SERVER = {"faust-streaming", "aiokafka", "confluent-kafka", "redis", "aiohttp", "scipy", "typer", "rich",
          "prometheus-client", "uvloop", "threadpoolctl", "cramjam", "pydantic"}
SERVER_MODULES = {"faust", "aiokafka", "confluent_kafka", "redis", "aiohttp", "scipy", "typer", "rich",
                  "prometheus_client", "uvloop", "pydantic"}


def pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True,
                   capture_output=True, timeout=900)


def fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def ask(python: Path, code: str) -> object:
    return json.loads(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True,
                                     timeout=120, cwd="/").stdout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip(Path(sys.executable), "wheel", "--no-deps", "-w", str(out), str(ROOT))
    (built,) = out.glob("ldpstream-*.whl")
    return built


@pytest.fixture(scope="module")
def device_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh environment with the base install (the wheel and its declared dependencies)."""
    python = fresh_venv(tmp_path_factory.mktemp("device") / "venv")
    pip(python, "install", str(wheel))
    yield python


def test_the_install_adds_one_top_level_package(device_install: Path) -> None:
    files = ask(device_install, "import importlib.metadata as m, json; "
                                "print(json.dumps([str(f) for f in m.distribution('ldpstream').files]))")
    assert isinstance(files, list)
    in_site = {f.split("/")[0] for f in files if not f.startswith("..")}
    assert {name for name in in_site if not name.endswith(".dist-info")} == {"ldpstream"}
    assert any(f.endswith("ldpstream/edge/openapi.json") for f in files)
    for name in ("openapi.json", "static/index.html", "static/collection.html", "static/console.js",
                 "static/console.css", "static/vendor/uPlot.iife.min.js", "static/vendor/uPlot.LICENSE"):
        assert any(f.endswith(f"ldpstream/readapi/{name}") for f in files), name
    assert any(f.endswith("ldpstream/py.typed") for f in files)


def test_the_base_install_is_the_device_and_brings_no_server_package(device_install: Path) -> None:
    installed = ask(device_install, "import importlib.metadata as m, json; "
                                    "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))")
    assert isinstance(installed, list)
    assert BASE <= set(installed) and not SERVER & set(installed)
    loaded = ask(device_install, "import sys, json; from ldpstream.device import Device; "
                                 "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    assert isinstance(loaded, list) and not SERVER_MODULES & set(loaded)


def test_the_command_line_of_a_device_install_says_what_to_install(device_install: Path) -> None:
    answer = subprocess.run([str(device_install.parent / "ldp"), "--help"], capture_output=True, text=True,
                            timeout=60)
    assert answer.returncode == 1 and "Traceback" not in answer.stderr
    assert "pip install 'ldpstream[server]'" in answer.stderr


def test_the_server_extra_declares_the_server_stack(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = {r.split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in requires if "extra ==" not in r}
    server = {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for r in requires
              if "extra == \"server\"" in r}
    assert base == BASE
    assert SERVER - {"aiokafka"} <= server  # aiokafka comes with faust-streaming
