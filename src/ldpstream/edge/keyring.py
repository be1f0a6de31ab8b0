"""The edge's master keys, by generation: rotation without re-enrolling every device at once.

Generation 0 is the file `LDP_EDGE_KEY_FILE` (default `.local/edge/master.key`); generation g >= 1 is the file
beside it with `.g` appended. Each is 32 random bytes, 0600. The newest generation signs new enrolments; a device's
id names the generation its key derives from (`k<g>.<random>` for g >= 1, plain random hex for 0), so the edge
finds the master without a lookup, and a device cannot move itself to another generation (its key would not
verify there).

Rotation (`ldp devices rotate-key`): add generation g + 1; new enrolments use it, devices of older generations
keep reporting. Retiring (`ldp devices retire-key G`) deletes generation G's file: every device of G is answered
401 from then on (they enrol again). Running edges re-read the files at most once a second (a retired generation
stops verifying within that second), and at once (at most 20 times a second) when a device names a generation they
do not know, so a device enrolled just after a rotation is not refused.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from ldpstream.contract.auth import AuthError, device_key
from ldpstream.runtime.secrets import create_secret

_GENERATION = re.compile(r"^k([1-9][0-9]{0,5})\.")
KEY_BYTES = 32


def generation_of(device: str) -> int:
    """The master-key generation a device id names (0 when it names none)."""
    match = _GENERATION.match(device)
    return int(match.group(1)) if match else 0


def new_device_id(generation: int) -> str:
    """A fresh random device id (96 random bits: ids never collide) under master-key `generation`."""
    random_part = secrets.token_hex(12)
    return random_part if generation == 0 else f"k{generation}.{random_part}"


class Keyring:
    """The master keys in the files of `path` (see the module docstring)."""

    def __init__(self, path: Path, reload_s: float = 1.0, unknown_reload_s: float = 0.05) -> None:
        self.path = path
        self.reload_s = reload_s
        self.unknown_reload_s = unknown_reload_s
        self._keys: dict[int, bytes] = {}
        self._read_at = self._unknown_read_at = -float("inf")
        self._read()

    @classmethod
    def create(cls, path: Path) -> Keyring:
        """The keyring at `path`, with generation 0 made on first use."""
        create_secret(path, lambda: secrets.token_bytes(KEY_BYTES))
        return cls(path)

    def _file(self, generation: int) -> Path:
        return self.path if generation == 0 else self.path.with_name(f"{self.path.name}.{generation}")

    def _read(self) -> None:
        self._read_at = time.monotonic()
        keys = {}
        for file in [self.path, *self.path.parent.glob(f"{self.path.name}.*")]:
            suffix = file.name[len(self.path.name):].lstrip(".")
            if suffix and not suffix.isdigit():
                continue
            try:
                key = file.read_bytes()
            except FileNotFoundError:
                continue
            if len(key) < KEY_BYTES:
                raise ValueError(f"{file}: a master key has at least {KEY_BYTES} bytes")
            keys[int(suffix or 0)] = key
        self._keys = keys

    @property
    def generations(self) -> list[int]:
        """The generations whose keys exist, oldest first."""
        return sorted(self._keys)

    @property
    def current(self) -> int:
        """The generation new enrolments use (the newest); FileNotFoundError if there is none."""
        if not self._keys:
            raise FileNotFoundError(f"{self.path}: no master key (`ldp up` or `ldp devices enroll` makes one)")
        return max(self._keys)

    def device_key(self, collection: str, device: str) -> bytes:
        """The key a device's requests must be signed with; AuthError if its generation has no master (retired,
        or never made)."""
        self.refresh()
        generation = generation_of(device)
        now = time.monotonic()
        if generation not in self._keys and now - self._unknown_read_at >= self.unknown_reload_s:
            self._unknown_read_at = now  # a device of a generation made since the last read: look now (bounded, as
            self._read()  # anyone can name a generation)
        master = self._keys.get(generation)
        if master is None:
            raise AuthError(f"device key generation {generation} is not in service (enrol again)")
        return device_key(master, collection, device)

    def refresh(self) -> None:
        """Re-read the key files if `reload_s` has passed since the last read (rotations and retirements)."""
        if time.monotonic() - self._read_at >= self.reload_s:
            self._read()

    def rotate(self) -> int:
        """Add the next generation (new enrolments use it); its number."""
        generation = self.current + 1
        create_secret(self._file(generation), lambda: secrets.token_bytes(KEY_BYTES))
        self._read()
        return generation

    def retire(self, generation: int) -> None:
        """Delete a generation's key: its devices are refused from now on. The current one cannot be retired."""
        if generation not in self._keys:
            raise ValueError(f"no master key generation {generation}; generations: {self.generations}")
        if generation == self.current:
            raise ValueError(f"generation {generation} is the current one: rotate first")
        self._file(generation).unlink()
        self._read()
