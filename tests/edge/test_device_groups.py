"""The edge's key groups: every key of one request in one Redis Cluster slot, a collection's devices spread over
the groups, and the one-hash layout of earlier versions moved into the groups by `ldp up`."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from redis.cluster import key_slot

from ldpstream.edge.devices import (
    EDGE_SLOTS,
    REPLAYED,
    Admission,
    Admit,
    DeviceRegistry,
    device_slot,
    devices_key,
    devices_keys,
    edge_keys,
    upgrade_devices_hashes,
)
from ldpstream.edge.keyring import Keyring, new_device_id
from ldpstream.runtime.access import ADMIN
from ldpstream.runtime.redis import async_redis_client, redis_client
from ldpstream.runtime.settings import Settings


def test_a_requests_keys_share_one_slot_and_devices_spread_over_every_group() -> None:
    devices = [new_device_id(0) for _ in range(4000)]
    for d in devices[:200]:
        keys = [devices_key("c", d), *Admission.window_keys("c", 1, d, np.array([0, 3_600_000]))]
        assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    counts = Counter(device_slot(d) for d in devices)
    assert set(counts) == set(range(EDGE_SLOTS))
    # each group's share of 4000 ids is Binomial(4000, 1/16): within 5 standard deviations of 250
    sd = (4000 * (1 / EDGE_SLOTS) * (1 - 1 / EDGE_SLOTS)) ** 0.5
    assert all(abs(n - 4000 / EDGE_SLOTS) <= 5 * sd for n in counts.values()), counts
    assert len({key_slot(k.encode()) for k in devices_keys("c")}) > 1


@pytest.fixture
def admin(live_services: Settings) -> Iterator[tuple[object, str]]:
    client = redis_client(live_services.redis, 10.0, principal=ADMIN)
    name = f"groups-{uuid.uuid4().hex[:8]}"
    yield client, name
    keys = [*client.scan_iter(edge_keys(name), count=1000), *client.scan_iter(f"ldp:edge:{name}:*", count=1000)]
    if keys:
        client.delete(*keys)


def test_enrol_revoke_and_the_old_layout_moved(admin: tuple[object, str], tmp_path: Path) -> None:
    client, name = admin
    registry = DeviceRegistry(client, Keyring.create(tmp_path / "master.key"))  # type: ignore[arg-type]
    enrolled = [c.device for c in registry.enroll(name, 300)]
    assert all(client.hget(devices_key(name, d), d) == b"1" for d in enrolled)  # type: ignore[attr-defined]
    assert registry.revoke(name, enrolled[:5]) == 5
    old = [new_device_id(0) for _ in range(50)]
    client.hset(f"ldp:edge:{name}:devices", mapping={d: 1 for d in old})  # type: ignore[attr-defined]
    assert name in upgrade_devices_hashes(client)  # type: ignore[arg-type]
    assert not client.exists(f"ldp:edge:{name}:devices")  # type: ignore[attr-defined]
    assert all(client.hget(devices_key(name, d), d) == b"1" for d in old + enrolled[5:])  # type: ignore[attr-defined]
    assert all(client.hget(devices_key(name, d), d) == b"0" for d in enrolled[:5])  # type: ignore[attr-defined]
    assert name not in upgrade_devices_hashes(client)  # type: ignore[arg-type]


def test_admission_runs_again_after_the_server_forgot_its_script(admin: tuple[object, str], tmp_path: Path,
                                                                 live_services: Settings) -> None:
    """Admission calls EVALSHA without asking first; a server that lost its scripts (a restart, SCRIPT FLUSH) gets
    the script loaded and the calls run once, with the answers of a server that always had it."""
    client, name = admin
    keyring = Keyring.create(tmp_path / "master.key")
    devices = [c.device for c in DeviceRegistry(client, keyring).enroll(name, 40)]  # type: ignore[arg-type]

    def requests(tag: str) -> list[Admit]:
        return [Admit(name, d, f"{tag}{i:060x}", "1h", 1, (i % 2,)) for i, d in enumerate(devices)]

    async def admit(batch: list[Admit]) -> list[list[int] | int]:
        redis = async_redis_client(live_services.redis, 10.0, principal="edge")
        try:
            return await Admission(redis, keyring, rate_per_s=100).admit(batch)
        finally:
            await redis.aclose()

    first = requests("a")
    assert asyncio.run(admit(first)) == [[] for _ in devices]
    marks = [key for r in first for key in r.marks]  # the keys the script made are the ones `release` deletes
    assert client.exists(*marks) == len(marks)  # type: ignore[attr-defined]
    client.script_flush()  # type: ignore[attr-defined]
    again = requests("b")
    assert asyncio.run(admit(again)) == [[0] for _ in devices]  # each window already used by the first requests
    assert asyncio.run(admit(again)) == [REPLAYED for _ in devices]  # ran exactly once: now replays
