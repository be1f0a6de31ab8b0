"""The TypeScript SDK's own Node test suite (sdk/typescript/test: every file under tests/vectors/, the policy, the
ledger, the outbox, the decoders fuzzed), run by pytest so that `make test` and CI run it; and the type check
(`tsc --strict`). Needs Node and the built SDK (`make install-test`), no service."""

from __future__ import annotations

import re
import subprocess

from ts_support import SDK, node, require_built


def test_the_node_suite_passes() -> None:
    require_built()
    done = subprocess.run([node(), "--test", "--test-reporter=tap", "test/"], cwd=SDK, capture_output=True, text=True,
                          timeout=600, check=False)
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.M)
    failed = re.search(r"^# fail (\d+)$", done.stdout, re.M)
    output = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0 and failed is not None and failed.group(1) == "0", output
    assert passed is not None and int(passed.group(1)) >= 100  # every vector case, at least


def test_the_sdk_type_checks_strictly() -> None:
    tsc = SDK / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "TypeScript is not installed: run `make install-test`"
    done = subprocess.run([str(tsc), "-p", "tsconfig.json", "--noEmit"], cwd=SDK, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:]
