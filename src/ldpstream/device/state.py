"""A device's own state between runs, in its state directory (0700): `device.json` (0600) holds, per collection, its
credential, the newest pointer it accepted and the signed bytes of the spec it uses, and the app-readable verdict
(accepted, or refused with the reason); the privacy ledger is `ledger.json` beside it (`ldpstream.device.ledger`),
and each collection's outbox is `outbox/NAME/`.

Every file is written atomically (a temporary file fsynced, then renamed over the old one), so a crash leaves the old
state or the new, never half of one. A state file that does not read back (damaged, or written by something else)
is a `StateError`: the device refuses to go on rather than guess, since a guess could forget a credential's key or
what it has accepted; the app decides (repair, or `reset` and enrol again). The signed bytes are kept as they came,
so they are verified again on every start: a file edited on disk is caught like a tampered download.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.contract.auth import Credential
from ldpstream.contract.files import write_atomically
from ldpstream.device.trust import Seen

FORMAT = 1
STATE_FILE = "device.json"
LEDGER_FILE = "ledger.json"
OUTBOX_DIR = "outbox"


class StateError(RuntimeError):
    """The device's state cannot be read or written (the message says which file and what to do)."""


@dataclass
class CollectionState:
    """What a device keeps about one collection."""

    credential: Credential | None = None
    seen: Seen = field(default_factory=Seen)
    pointer: bytes | None = None  # the last pointer accepted, exactly as signed
    pointer_block: bytes | None = None
    pointer_etag: str | None = None
    spec: bytes | None = None  # the spec in use, exactly as signed
    spec_block: bytes | None = None
    verdict: dict[str, Any] | None = None  # {"accepted", "code", "reason"}: the app reads it

    def to_dict(self) -> dict[str, Any]:
        return {"credential": None if self.credential is None else self.credential.to_json(),
                "seen": [self.seen.version, self.seen.sequence], "pointer": _b64(self.pointer),
                "pointer_block": _b64(self.pointer_block), "pointer_etag": self.pointer_etag,
                "spec": _b64(self.spec), "spec_block": _b64(self.spec_block), "verdict": self.verdict}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CollectionState:
        credential = None if d["credential"] is None else Credential.from_json(d["credential"])
        version, sequence = d["seen"]
        if type(version) is not int or type(sequence) is not int:
            raise ValueError("seen is [version, sequence]")
        verdict = d["verdict"]
        if verdict is not None and not isinstance(verdict, dict):
            raise ValueError("a verdict is an object")
        etag = d["pointer_etag"]
        if etag is not None and not isinstance(etag, str):
            raise ValueError("an etag is text")
        return cls(credential, Seen(version, sequence), _unb64(d["pointer"]), _unb64(d["pointer_block"]), etag,
                   _unb64(d["spec"]), _unb64(d["spec_block"]), verdict)


class DeviceState:
    """The collections a device has joined, in `directory/device.json` (module docstring)."""

    def __init__(self, directory: Path, collections: dict[str, CollectionState]) -> None:
        self.directory = directory
        self.collections = collections

    @classmethod
    def open(cls, directory: str | Path) -> DeviceState:
        """The state in `directory` (made, 0700, if missing; empty if it holds no state yet); StateError if the
        state file does not read back."""
        path = Path(directory)
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            text = (path / STATE_FILE).read_text() if (path / STATE_FILE).exists() else None
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"cannot read the device state in {path}: {exc}") from exc
        if text is None:
            return cls(path, {})
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            collections = {str(k): CollectionState.from_dict(v) for k, v in data["collections"].items()}
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise StateError(f"the device state {path / STATE_FILE} is damaged ({exc!r}): the device will not guess "
                             f"what it held; repair it, or reset the device (it then enrols again)") from None
        return cls(path, collections)

    def of(self, collection: str) -> CollectionState:
        """The state of a collection (a fresh one if the device never joined it)."""
        return self.collections.setdefault(collection, CollectionState())

    @property
    def ledger_path(self) -> Path:
        return self.directory / LEDGER_FILE

    def outbox_path(self, collection: str) -> Path:
        return self.directory / OUTBOX_DIR / collection

    def save(self) -> None:
        """Write the state atomically and durably; StateError (nothing changed on disk) if it cannot be written,
        e.g. a full disk."""
        body = json.dumps({"format": FORMAT, "collections": {k: v.to_dict()
                                                            for k, v in sorted(self.collections.items())}})
        save_file(self.directory / STATE_FILE, body.encode())


def save_file(path: Path, data: bytes) -> None:
    """Replace the device's file `path` with `data` (0600, `ldpstream.contract.files.write_atomically`); StateError
    if that fails (the old file is left as it was)."""
    try:
        write_atomically(path, data, 0o600)
    except OSError as exc:
        raise StateError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: Any) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError("bytes are base64 text")
    return base64.b64decode(text, validate=True)
