"""How fast the command line and the device SDK start, and what the device SDK loads.

Each command runs as a fresh process (`--runs` times after one warm-up, the median quoted): `ldp --help`,
`ldp COMMAND --help` for every command of `ldpstream.cli.COMMANDS`, and `python -c "import ldpstream.device"`.
The device's import also lists the top-level modules it loaded, and which of the server stack's (faust, aiokafka,
confluent_kafka, redis, aiohttp, scipy) are among them: none may be. The ceiling measured in the same run is a bare
`python -c pass`, what any Python command pays. The package is byte-compiled first, as pip does when it installs.

Goals (issue 24): every `--help` at most 0.5 s wall, the device import at most 0.3 s, no server module loaded.

Run: .venv/bin/python benchmarks/bench_startup.py [--runs 5]
Prints one JSON object: {"runs", "python_pass_s", "ldp_help_s", "command_help_s": {command: s},
"slowest_command_help": [command, s], "device_import_s", "device_modules", "device_server_modules"}.
"""

from __future__ import annotations

import argparse
import compileall
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ldpstream.cli.commands import COMMANDS

SERVER_MODULES = ("faust", "aiokafka", "confluent_kafka", "redis", "aiohttp", "scipy")
LDP = str(Path(sys.executable).with_name("ldp"))
DEVICE_MODULES = "import sys, ldpstream.device; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"


def wall_s(argv: list[str], runs: int) -> float:
    """The median wall time of `argv` over `runs` runs after one warm-up (a failing command is an error)."""
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # pip byte-compiles what it installs; an editable install compiles on first import, and not at all where
    # PYTHONDONTWRITEBYTECODE is set (as on our CI machines), which would time the compiler instead of the import
    import ldpstream

    compileall.compile_dir(str(Path(ldpstream.__file__).parent), quiet=1)
    commands = {name: wall_s([LDP, name, "--help"], args.runs) for name in COMMANDS}
    loaded = subprocess.run([sys.executable, "-c", DEVICE_MODULES], check=True, capture_output=True,
                            text=True).stdout.split()
    slowest = max(commands.items(), key=lambda item: item[1])
    print(json.dumps({
        "runs": args.runs,
        "python_pass_s": round(wall_s([sys.executable, "-c", "pass"], args.runs), 3),
        "ldp_help_s": round(wall_s([LDP, "--help"], args.runs), 3),
        "command_help_s": {name: round(s, 3) for name, s in commands.items()},
        "slowest_command_help": [slowest[0], round(slowest[1], 3)],
        "device_import_s": round(wall_s([sys.executable, "-c", "import ldpstream.device"], args.runs), 3),
        "device_modules": loaded,
        "device_server_modules": sorted(set(loaded) & set(SERVER_MODULES)),
    }))


if __name__ == "__main__":
    main()
