"""The coordinator's checkpoint: a job's model version, the running sum of its accepted gradients, participants.

One contract, two backends (`RedisCheckpoint`, `MemoryCheckpoint`), run through the same tests. Two writes, each
atomic (one Lua script in Redis), so that a coordinator killed at any point resumes at its version t without losing
accepted gradients and without letting any device take part twice:

`accumulate(update)`, once per micro-batch of one partition of `ldp.sgd.gradients`:
1. if the batch's last offset is <= the offset already applied for its partition, nothing is written (`skipped`,
   a replay after a restart); if only its first offset is, nothing is written either (`overlap`); if its first
   offset is beyond applied + 1 (NOT_APPLIED, -1, for a partition without one), nothing is written (`gap`: the
   checkpoint went back in time, below);
2. if the stored version or gradient count is not the one the caller computed against, nothing is written
   (`conflict`: the caller reloads);
3. if any of its devices already took part in this job, nothing is written and they are returned (`duplicates`:
   the caller rejects them and tries again without them);
4. otherwise in one step: the devices join the participants (with the version they took part in), the gradient
   sum and count of version t grow, the outcome counters grow, and the partition's offset is recorded.
`advance(job_id, t, new)`, once g gradients of version t are in: in one step the parameters become version
t + 1's, the sum and count restart at zero, and the done flag and stop reason are set if training stops.

What happens if the coordinator dies: before `accumulate` the batch is not in the store and the coordinator,
which always seeks each partition to the stored offset + 1 (never to Kafka's committed offsets), reads it again;
after it, a replay is skipped at step 1. Between `accumulate` completing g gradients and `advance`, the restarted
coordinator finds count == g and advances from the stored sum; after `advance` it publishes version t + 1.

What happens if the checkpoint goes back in time (Redis loses writes it acknowledged: the tail of its append-only
file after a crash, a failover to a replica that lagged, a restored snapshot): whole scripts are lost, so the
offsets, version, sum, count, participants and counters go back together, to a state as if the lost batches had
never been applied. The coordinator notices (a `gap` at step 1, or a stored version or count older than the one
it holds), reloads the job, finishes a pending `advance`, publishes that version again and reads every partition
again from its applied offset + 1 (`ldpstream.sgd.coordinator`): each lost batch is applied once more, devices
still take part at most once, and gradients computed at a lost later version are rejected (`future_version`).
Kafka must still have those messages: offsets its retention deleted are skipped with `skip_lost` and reported
(`ldpstream.runtime.offsets`).

Keys share one hash tag per job (`ldp:sgd:{JOB}:...`), so each script touches one Redis Cluster slot.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from ldpstream.runtime.offsets import NOT_APPLIED
from ldpstream.runtime.redis import move_applied_offset, redis_client
from ldpstream.sgd.training import Trainer, TrainingJob
from ldpstream.sgd.wire import job_spec

LUA_CHUNK = 2000  # members per Redis call inside a script (Lua's unpack limit is about 8000 values)


class CheckpointError(RuntimeError):
    """The checkpoint refuses an operation (a job id reused with a different spec, an unknown job)."""


@dataclass(frozen=True)
class JobState:
    """A job as checkpointed: version t, its parameters, the running sum and count of version t's gradients."""

    job: TrainingJob
    t: int
    params: np.ndarray
    last_step: float
    count: int
    gradient_sum: np.ndarray
    done: bool = False
    stop_reason: str = ""
    metadata: str = ""  # JSON the driver keeps with the job (the simulation a demo job runs), '' if none

    def trainer(self) -> Trainer:
        """The model version t as a `Trainer`."""
        return Trainer(self.job, self.params, self.t, self.last_step)


@dataclass(frozen=True)
class GradientUpdate:
    """What one micro-batch of one partition adds to a job: accepted gradients of version t and outcome counts."""

    job_id: str
    source: str  # "topic:partition"
    first_offset: int
    last_offset: int
    t: int  # the version the accepted gradients are for: the stored t
    count_before: int  # the stored count they add to
    devices: np.ndarray  # uint64 pseudonyms of the accepted devices
    gradient_sum: np.ndarray  # the sum of their unbiased gradient vectors, length k
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AccumulateResult:
    status: str  # "applied" | "skipped" | "overlap" | "gap" | "conflict" | "duplicates"
    duplicates: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))


class Checkpoint(ABC):
    """The contract both backends implement."""

    @abstractmethod
    def create(self, job: TrainingJob, start_offsets: dict[str, int], metadata: str = "") -> JobState:
        """Version 0 of a new job with the given applied offsets per partition, or the stored state of the job
        if it exists (CheckpointError if it exists with a different spec)."""

    @abstractmethod
    def load(self, job_id: str) -> JobState | None:
        """The job's state, or None if there is no such job."""

    @abstractmethod
    def accumulate(self, update: GradientUpdate) -> AccumulateResult:
        """Apply a micro-batch's gradients and counters atomically (module docstring, steps 1-4)."""

    @abstractmethod
    def advance(self, job_id: str, t: int, new: Trainer, stop_reason: str | None) -> bool:
        """Replace version t (which must hold g gradients) by `new`; False (nothing written) if the stored
        version is not t or its count is not g."""

    @abstractmethod
    def finish(self, job_id: str, t: int, stop_reason: str) -> bool:
        """Mark version t final without an update; False if the stored version is not t."""

    @abstractmethod
    def skip_lost(self, job_id: str, source: str, applied: int, log_start: int) -> bool:
        """Move a partition's applied offset from `applied` over gradients Kafka no longer has, to `log_start` - 1,
        atomically; False (nothing written) if it is not `applied` any more
        (`ldpstream.runtime.offsets.resume_offset`)."""

    @abstractmethod
    def offsets(self, job_id: str) -> dict[str, int]:
        """Last applied offset per "topic:partition"."""

    @abstractmethod
    def outcomes(self, job_id: str) -> dict[str, int]:
        """Counters of gradients by outcome ("accepted", "dropped:<reason>", "rejected:<reason>")."""

    @abstractmethod
    def versions(self, job_id: str) -> dict[int, int]:
        """Accepted gradients per model version."""

    @abstractmethod
    def participants(self, job_id: str) -> dict[int, int]:
        """Every device that took part, with the version its gradient was accepted for."""

    @abstractmethod
    def delete(self, job_id: str) -> None:
        """Forget a job (tests and maintenance)."""


def prefix(job_id: str) -> str:
    """The key prefix of a job, with its Redis Cluster hash tag."""
    return f"ldp:sgd:{{{job_id}}}"


def _fresh_state(job: TrainingJob, metadata: str) -> JobState:
    k = job.gradient_dims
    return JobState(job, 0, np.zeros(k), math.inf, 0, np.zeros(k), metadata=metadata)


def _check_same_job(stored: JobState, job: TrainingJob) -> JobState:
    if job_spec(stored.job) != job_spec(job):
        raise CheckpointError(f"job {job.job_id!r} exists with a different spec: {job_spec(stored.job)}")
    return stored


# ---------------------------------------------------------------------------------------------------------------
# Redis. The state hash holds: job, metadata, t, params (float64 LE bytes), last_step, count, done, stop_reason,
# and s0 .. s{k-1}: version t's gradient sum.
# KEYS: 1 state, 2 participants (device -> version), 3 versions (version -> accepted), 4 outcomes, 5 offsets
# ARGV: 1 source, 2 first offset, 3 last offset, 4 t, 5 count before, 6 m, 7 k, then m devices, k sums, then c,
#       c (outcome, n) pairs.
ACCUMULATE_SCRIPT = """
local applied = tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '-1')
if applied >= tonumber(ARGV[3]) then return {'skipped'} end
if applied >= tonumber(ARGV[2]) then return {'overlap'} end
if applied + 1 < tonumber(ARGV[2]) then return {'gap'} end
local m, k = tonumber(ARGV[6]), tonumber(ARGV[7])
local CHUNK = tonumber(ARGV[8])
local state = redis.call('HMGET', KEYS[1], 't', 'count', 'done')
if not state[1] then return {'conflict'} end
if m > 0 and (state[1] ~= ARGV[4] or state[2] ~= ARGV[5] or state[3] == '1') then return {'conflict'} end
local first = 9
local dups = {'duplicates'}
local s = 0
while s < m do
  local e = math.min(s + CHUNK, m)
  local found = redis.call('HMGET', KEYS[2], unpack(ARGV, first + s, first + e - 1))
  for j = 1, #found do
    if found[j] then table.insert(dups, ARGV[first + s + j - 1]) end
  end
  s = e
end
if #dups > 1 then return dups end
s = 0
while s < m do
  local e = math.min(s + CHUNK, m)
  local kv = {}
  for j = first + s, first + e - 1 do
    table.insert(kv, ARGV[j]); table.insert(kv, ARGV[4])
  end
  redis.call('HSET', KEYS[2], unpack(kv))
  s = e
end
local pos = first + m
if m > 0 then
  redis.call('HINCRBY', KEYS[3], ARGV[4], m)
  redis.call('HINCRBY', KEYS[1], 'count', m)
  for j = 0, k - 1 do redis.call('HINCRBYFLOAT', KEYS[1], 's' .. j, ARGV[pos + j]) end
end
pos = pos + k
local c = tonumber(ARGV[pos])
for j = 1, c do redis.call('HINCRBY', KEYS[4], ARGV[pos + 2 * j - 1], ARGV[pos + 2 * j]) end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[3])
return {'applied'}
"""

# KEYS: 1 state. ARGV: 1 t, 2 g (0: no count check, a `finish`), 3 params, 4 last_step, 5 done, 6 stop reason,
# 7 new t, 8 k
ADVANCE_SCRIPT = """
local state = redis.call('HMGET', KEYS[1], 't', 'count', 'done')
if state[1] ~= ARGV[1] or state[3] == '1' then return 0 end
if tonumber(ARGV[2]) > 0 and tonumber(state[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 't', ARGV[7], 'params', ARGV[3], 'last_step', ARGV[4], 'done', ARGV[5],
           'stop_reason', ARGV[6])
if ARGV[7] ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'count', 0)
  for j = 0, tonumber(ARGV[8]) - 1 do redis.call('HSET', KEYS[1], 's' .. j, 0) end
end
return 1
"""

# KEYS: 1 state, 2 offsets. ARGV: 1 job spec, then the state's initial (field, value) pairs, '--', offset pairs.
CREATE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local i = 1
local fields = {}
while ARGV[i] ~= '--' do table.insert(fields, ARGV[i]); i = i + 1 end
redis.call('HSET', KEYS[1], unpack(fields))
local offsets = {}
for j = i + 1, #ARGV do table.insert(offsets, ARGV[j]) end
if #offsets > 0 then redis.call('HSET', KEYS[2], unpack(offsets)) end
return 1
"""


def _pseudonym_bytes(devices: np.ndarray) -> list[bytes]:
    """uint64 pseudonyms as 8-byte LE strings (numpy's S8 drops trailing NULs: injective, undone by ljust)."""
    return np.ascontiguousarray(devices, dtype="<u8").view("S8").tolist()  # type: ignore[no-any-return]


def _pseudonyms(raw: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(r.ljust(8, b"\0") for r in raw), dtype="<u8").astype(np.uint64)


class RedisCheckpoint(Checkpoint):
    """The checkpoint in Redis; each write is one Lua script (atomic, one slot per job)."""

    def __init__(self, url: str) -> None:
        self.redis = redis_client(url)
        self._accumulate = self.redis.register_script(ACCUMULATE_SCRIPT)
        self._advance = self.redis.register_script(ADVANCE_SCRIPT)
        self._create = self.redis.register_script(CREATE_SCRIPT)

    def _hash(self, key: str) -> dict[bytes, bytes]:
        return cast(dict[bytes, bytes], self.redis.hgetall(key))  # bytes: the client does not decode responses

    def _keys(self, job_id: str) -> list[str]:
        p = prefix(job_id)
        return [f"{p}:state", f"{p}:participants", f"{p}:versions", f"{p}:outcomes", f"{p}:offsets"]

    def create(self, job: TrainingJob, start_offsets: dict[str, int], metadata: str = "") -> JobState:
        fresh = _fresh_state(job, metadata)
        fields: list[str | bytes | int] = ["job", job_spec(job), "metadata", metadata, "t", 0,
                                           "params", fresh.params.astype("<f8").tobytes(), "last_step", "inf",
                                           "count", 0, "done", 0, "stop_reason", ""]
        for j in range(job.gradient_dims):
            fields += [f"s{j}", 0]
        offsets = [x for source, offset in sorted(start_offsets.items()) for x in (source, offset)]
        keys = self._keys(job.job_id)
        self._create(keys=[keys[0], keys[4]], args=[*fields, "--", *offsets])
        stored = self.load(job.job_id)
        assert stored is not None
        return _check_same_job(stored, job)

    def load(self, job_id: str) -> JobState | None:
        raw = {k.decode(): v for k, v in self._hash(self._keys(job_id)[0]).items()}
        if not raw:
            return None
        job = TrainingJob.model_validate_json(raw["job"])
        k = job.gradient_dims
        return JobState(job, int(raw["t"]), np.frombuffer(raw["params"], dtype="<f8").astype(np.float64),
                        float(raw["last_step"]), int(raw["count"]),
                        np.array([float(raw[f"s{j}"]) for j in range(k)]), raw["done"] == b"1",
                        raw["stop_reason"].decode(), raw["metadata"].decode())

    def accumulate(self, update: GradientUpdate) -> AccumulateResult:
        sums = np.asarray(update.gradient_sum, dtype=np.float64)
        devices = _pseudonym_bytes(update.devices)
        args: list[str | bytes | int] = [update.source, update.first_offset, update.last_offset, update.t,
                                         update.count_before, len(devices), len(sums), LUA_CHUNK, *devices,
                                         *(repr(float(v)) for v in sums), len(update.outcomes)]
        for key, n in sorted(update.outcomes.items()):
            args += [key, n]
        reply = self._accumulate(keys=self._keys(update.job_id), args=args)
        status = reply[0].decode()
        if status == "duplicates":
            return AccumulateResult(status, _pseudonyms(reply[1:]))
        return AccumulateResult(status)

    def _write_version(self, job_id: str, t: int, g: int, new: Trainer, done: bool, reason: str) -> bool:
        args: list[str | bytes | int] = [t, g, np.asarray(new.params, dtype="<f8").tobytes(), repr(new.last_step),
                                         int(done), reason, new.t, new.job.gradient_dims]
        return bool(self._advance(keys=self._keys(job_id)[:1], args=args))

    def advance(self, job_id: str, t: int, new: Trainer, stop_reason: str | None) -> bool:
        return self._write_version(job_id, t, new.job.mini_batch_size, new, stop_reason is not None,
                                   stop_reason or "")

    def finish(self, job_id: str, t: int, stop_reason: str) -> bool:
        state = self.load(job_id)
        if state is None or state.t != t:
            return False
        return self._write_version(job_id, t, 0, state.trainer(), True, stop_reason)

    def skip_lost(self, job_id: str, source: str, applied: int, log_start: int) -> bool:
        return move_applied_offset(self.redis, self._keys(job_id)[4], source, applied, log_start - 1)

    def offsets(self, job_id: str) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self._hash(self._keys(job_id)[4]).items()}

    def outcomes(self, job_id: str) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self._hash(self._keys(job_id)[3]).items()}

    def versions(self, job_id: str) -> dict[int, int]:
        return {int(k): int(v) for k, v in self._hash(self._keys(job_id)[2]).items()}

    def participants(self, job_id: str) -> dict[int, int]:
        raw = self._hash(self._keys(job_id)[1])
        devices = _pseudonyms(list(raw))
        return dict(zip(devices.tolist(), (int(v) for v in raw.values()), strict=True))

    def delete(self, job_id: str) -> None:
        self.redis.delete(*self._keys(job_id))


# ---------------------------------------------------------------------------------------------------------------
class MemoryCheckpoint(Checkpoint):
    """The same contract in process memory (unit tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, JobState] = {}
        self._participants: dict[str, dict[int, int]] = defaultdict(dict)
        self._versions: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self._outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._offsets: dict[str, dict[str, int]] = defaultdict(dict)

    def create(self, job: TrainingJob, start_offsets: dict[str, int], metadata: str = "") -> JobState:
        with self._lock:
            if job.job_id not in self._states:
                self._states[job.job_id] = _fresh_state(job, metadata)
                self._offsets[job.job_id].update(start_offsets)
            return _check_same_job(self._states[job.job_id], job)

    def load(self, job_id: str) -> JobState | None:
        return self._states.get(job_id)

    def accumulate(self, update: GradientUpdate) -> AccumulateResult:
        j = update.job_id
        with self._lock:
            applied = self._offsets[j].get(update.source, NOT_APPLIED)
            if applied >= update.last_offset:
                return AccumulateResult("skipped")
            if applied >= update.first_offset:
                return AccumulateResult("overlap")
            if applied + 1 < update.first_offset:
                return AccumulateResult("gap")
            state = self._states.get(j)
            devices = [int(d) for d in np.asarray(update.devices, dtype=np.uint64).tolist()]
            if state is None or (devices and (state.t != update.t or state.count != update.count_before
                                              or state.done)):
                return AccumulateResult("conflict")
            dups = [d for d in devices if d in self._participants[j]]
            if dups:
                return AccumulateResult("duplicates", np.asarray(dups, dtype=np.uint64))
            if devices:
                self._participants[j].update(dict.fromkeys(devices, update.t))
                self._versions[j][update.t] += len(devices)
                self._states[j] = replace(state, count=state.count + len(devices),
                                           gradient_sum=state.gradient_sum + np.asarray(update.gradient_sum))
            for key, n in update.outcomes.items():
                self._outcomes[j][key] += n
            self._offsets[j][update.source] = update.last_offset
            return AccumulateResult("applied")

    def _write_version(self, job_id: str, t: int, g: int, new: Trainer, done: bool, reason: str) -> bool:
        with self._lock:
            state = self._states.get(job_id)
            if state is None or state.t != t or state.done or (g and state.count != g):
                return False
            moved = new.t != t
            self._states[job_id] = JobState(
                state.job, new.t, np.array(new.params), new.last_step, 0 if moved else state.count,
                np.zeros_like(state.gradient_sum) if moved else state.gradient_sum, done, reason, state.metadata)
            return True

    def advance(self, job_id: str, t: int, new: Trainer, stop_reason: str | None) -> bool:
        return self._write_version(job_id, t, new.job.mini_batch_size, new, stop_reason is not None,
                                   stop_reason or "")

    def finish(self, job_id: str, t: int, stop_reason: str) -> bool:
        state = self._states.get(job_id)
        return state is not None and self._write_version(job_id, t, 0, state.trainer(), True, stop_reason)

    def skip_lost(self, job_id: str, source: str, applied: int, log_start: int) -> bool:
        with self._lock:
            if self._offsets[job_id].get(source, NOT_APPLIED) != applied:
                return False
            self._offsets[job_id][source] = log_start - 1
            return True

    def offsets(self, job_id: str) -> dict[str, int]:
        return dict(self._offsets[job_id])

    def outcomes(self, job_id: str) -> dict[str, int]:
        return dict(self._outcomes[job_id])

    def versions(self, job_id: str) -> dict[int, int]:
        return dict(self._versions[job_id])

    def participants(self, job_id: str) -> dict[int, int]:
        return dict(self._participants[job_id])

    def delete(self, job_id: str) -> None:
        with self._lock:
            for table in (self._states, self._participants, self._versions, self._outcomes, self._offsets):
                table.pop(job_id, None)  # type: ignore[attr-defined]


