"""The per-process collective-state record: what is in flight, beside the active-span records.

A process instrumented with the collective instrumentor publishes, per process group, the
oldest collective still in flight on it (op, group, seq, bytes, device, since when) and the
last sequence number that completed, in one small memory-mapped file in the active-span
records' folder (:func:`~otel_ext.instrumentation.active_span_record.record_directory`).
The node agent (``otel-ext exporter``) reads it and exports
``accel.collective.pending.duration`` and ``accel.collective.last_seq``, so a hung or
desynchronised collective is visible while it hangs.

Nothing here runs on the workload thread: the native recording kernel's poller keeps the
state (``Hook.watch_state``), and a background thread of the instrumentor copies it here
when it changes.

**Layout.** Unsigned 64-bit words in the host's byte order: ``MAGIC``
(``b"OTXCOLL1"``), ``VERSION`` (1), ``SEQ`` (a seqlock: odd while the writer updates),
``PID``, ``UPDATED_NS``, ``LENGTH`` (bytes of the payload), two reserved words; then the
payload, UTF-8 JSON of at most :data:`PAYLOAD_BYTES` bytes::

    {"host": "node1", "rank": 3,
     "groups": [{"group": "0", "group_size": 4, "group_rank": 3, "device": "node1/cpu",
                 "op": "all_reduce", "seq": 5, "bytes": 4096, "since_ns": 17...,
                 "last_seq": 4}]}

``op``, ``seq``, ``bytes``, ``since_ns`` are ``null`` when nothing is pending on the group;
``last_seq`` is ``-1`` before the first completion. The file name is
``collectives.PID.TOKEN.coll``. Lifetime, locking and permissions are those of the
active-span records: created under a temporary name, locked with a shared ``flock`` held for
the writer's life, renamed into place, removed at exit; a killed writer's file is recognised
by its free lock (:func:`read_states` skips it, and removes it when asked to).

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> rec = CollectiveStateRecord(folder, host="h", rank=1)
>>> rec.publish([GroupState("0", 2, 1, "h/cpu", "all_reduce", 5, 64, 1_000, 4)])
True
>>> [(s.rank, g.seq, g.last_seq) for s in read_states([folder]) for g in s.groups]
[(1, 5, 4)]
>>> rec.close(); read_states([folder])
[]
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from otel_ext.instrumentation.active_span_record import writer_alive

__all__ = [
    "PAYLOAD_BYTES",
    "SUFFIX",
    "CollectiveState",
    "CollectiveStateRecord",
    "GroupState",
    "decode_state",
    "read_states",
]

MAGIC = int.from_bytes(b"OTXCOLL1", "little")
VERSION = 1
W_MAGIC, W_VERSION, W_SEQ, W_PID, W_UPDATED, W_LENGTH = range(6)
HEADER_WORDS = 8
RECORD_BYTES = 16384
PAYLOAD_BYTES = RECORD_BYTES - HEADER_WORDS * 8
SUFFIX = ".coll"
FILE_MODE = 0o640
_READ_TRIES = 4


@dataclass(frozen=True, slots=True)
class GroupState:
    """One process group's state in one process.

    Attributes:
        group: the group name (``accel.collective.group``).
        group_size: members of the group.
        group_rank: this process's rank in it.
        device: ``accel.device.id`` of the pending collective (else of the process).
        op: the oldest pending collective's op, ``None`` when none is pending.
        seq: its sequence number.
        bytes: its payload bytes.
        since_ns: when it was issued (ns since the epoch).
        last_seq: the last sequence number that completed (-1: none yet).
    """

    group: str
    group_size: int
    group_rank: int
    device: str | None
    op: str | None
    seq: int | None
    bytes: int | None
    since_ns: int | None
    last_seq: int


@dataclass(frozen=True, slots=True)
class CollectiveState:
    """A consistent copy of one process's record."""

    path: str
    pid: int
    host: str
    rank: int | None
    updated_ns: int
    groups: list[GroupState]


def _encode(host: str, rank: int | None, groups: Iterable[GroupState]) -> bytes:
    doc = {"host": host, "rank": rank, "groups": [asdict(g) for g in groups]}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_state(data: bytes | bytearray | memoryview, *, path: str = "") -> CollectiveState | None:
    """Decode a copy of a record file; ``None`` if it is not a complete, settled record.

    >>> decode_state(b"short") is None
    True
    """
    if len(data) < RECORD_BYTES:
        return None
    words = memoryview(data)[: HEADER_WORDS * 8].cast("Q")
    length = words[W_LENGTH]
    if (
        words[W_MAGIC] != MAGIC
        or words[W_VERSION] != VERSION
        or words[W_SEQ] & 1
        or length > PAYLOAD_BYTES
    ):
        return None
    if length == 0:
        return CollectiveState(path, words[W_PID], "", None, words[W_UPDATED], [])
    raw = bytes(data[HEADER_WORDS * 8 : HEADER_WORDS * 8 + length])
    try:
        doc = json.loads(raw)
        groups = [GroupState(**g) for g in doc["groups"]]
        host, rank = str(doc.get("host", "")), doc.get("rank")
    except (ValueError, TypeError, KeyError):
        return None  # not what a writer writes (a torn copy): skipped
    rank = rank if isinstance(rank, int) else None
    return CollectiveState(path, words[W_PID], host, rank, words[W_UPDATED], groups)


class CollectiveStateRecord:
    """The writer of one process's record (one background thread writes it).

    Args:
        directory: the folder (the active-span records' folder, already prepared).
        host: ``accel.host.id``.
        rank: the process's global rank (``accel.rank``), when known.
        clock: real-time clock in ns.

    Raises:
        OSError: the file cannot be created (the caller then publishes nothing).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        host: str,
        rank: int | None,
        clock: Callable[[], int] = time.time_ns,
    ):
        folder = Path(directory)
        pid = os.getpid()
        token = secrets.token_hex(4)
        self.path = folder / f"collectives.{pid}.{token}{SUFFIX}"
        self.host, self.rank, self._clock = host, rank, clock
        tmp = folder / f".{token}.{pid}.coll.tmp"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
        fd = os.open(tmp, flags, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            os.ftruncate(fd, RECORD_BYTES)
            self._mm = mmap.mmap(fd, RECORD_BYTES, mmap.MAP_SHARED)
            w = self._words = memoryview(self._mm)[: HEADER_WORDS * 8].cast("Q")
            w[W_VERSION], w[W_PID], w[W_UPDATED] = VERSION, pid, clock()
            w[W_MAGIC] = MAGIC
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._fd = fd
        self._pid = pid
        self._seq = 0
        self._last = b""
        self.truncated = 0
        self.closed = False

    def publish(self, groups: Iterable[GroupState]) -> bool:
        """Write ``groups`` if they differ from what is there; whether it wrote."""
        if self.closed:
            return False
        payload = _encode(self.host, self.rank, groups)
        if payload == self._last:
            return False
        if len(payload) > PAYLOAD_BYTES:  # thousands of groups: keep the first ones
            kept = list(groups)
            while kept and len(payload) > PAYLOAD_BYTES:
                kept = kept[: len(kept) // 2]
                payload = _encode(self.host, self.rank, kept)
            self.truncated += 1
        w, seq = self._words, self._seq
        w[W_SEQ] = seq + 1
        start = HEADER_WORDS * 8
        self._mm[start : start + len(payload)] = payload
        w[W_LENGTH] = len(payload)
        w[W_UPDATED] = self._clock()
        w[W_SEQ] = self._seq = seq + 2
        self._last = payload
        return True

    def close(self, *, unlink: bool = True) -> None:
        """Stop writing; remove the file (``unlink``). Never raises."""
        if self.closed:
            return
        self.closed = True
        if unlink and os.getpid() == self._pid:  # a forked child never removes the parent's
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        with contextlib.suppress(BufferError, ValueError):
            self._words.release()
            self._mm.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _read_one(path: str, *, reap: bool) -> CollectiveState | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not writer_alive(fd):
            if reap:
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_ino == os.fstat(fd).st_ino:
                        os.unlink(path)
            return None
        if os.fstat(fd).st_size < RECORD_BYTES:
            return None
        with mmap.mmap(fd, RECORD_BYTES, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            seq_at = W_SEQ * 8
            for _ in range(_READ_TRIES):
                before = int.from_bytes(mm[seq_at : seq_at + 8], "little")
                if before & 1:
                    continue
                data = mm[:RECORD_BYTES]
                if before == int.from_bytes(mm[seq_at : seq_at + 8], "little"):
                    return decode_state(data, path=path)
        return None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def read_states(
    directories: Iterable[str | os.PathLike[str]], *, reap: bool = False
) -> list[CollectiveState]:
    """Every live writer's record in ``directories`` (records of dead writers are skipped,
    and removed when ``reap``). Never raises."""
    out = []
    for folder in dict.fromkeys(map(str, directories)):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.startswith(".") or not name.endswith(SUFFIX):
                continue
            state = _read_one(os.path.join(folder, name), reap=reap)
            if state is not None:
                out.append(state)
    return out
