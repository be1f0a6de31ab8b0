"""The TypeScript SDK's tests reuse the integration tests' support modules (an edge process, a published
collection, the pipeline's checks)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
