"""The per-device active-span record: "the span now running on device D", shared across processes.

A workload process that runs spans on device ``D`` (``accel.device.id``) keeps one small
memory-mapped file per device, and the node agent (``otel-ext exporter``) on the same host
reads it to attach, as the exemplar of D's counters, the span that ran for most of each
sampling interval. This module is the contract between the two: the file layout, the
folder, the writer (:class:`ActiveSpanRecord`) and the decoder (:func:`decode_record`).

**Layout** (``docs/counters.md`` shows it as a table). One file is an array of unsigned
64-bit words in the host's byte order (:data:`RECORD_WORDS` words, 11,136 bytes):

* header, 32 words: ``MAGIC`` (``b"OTXSPAN1"``), ``VERSION`` (1), ``SEQ`` (the seqlock:
  odd while the writer updates), ``PID``, ``CREATED_NS``, ``EVICTED_END_NS`` (the latest
  end time of an entry the ring overwrote), ``HEAD`` (entries ever written to the ring),
  ``DROPPED`` (updates that found no free open slot), then the device id (128 bytes, UTF-8,
  NUL-padded), the layout sizes (open slots, ring slots, words per entry) and the
  device's UUID when the writer knows it (40 bytes, ASCII, ``GPU-...`` as NVML writes it);
* :data:`OPEN_SLOTS` open entries: spans started and not yet ended;
* :data:`RING_SLOTS` ring entries: spans ended, the newest ``HEAD % RING_SLOTS`` last.

An entry is five words: trace id (high, low 64 bits), span id, start and end in ns since
the epoch (the host's real-time clock, as span timestamps are); span id 0 marks a free
entry, end 0 an open one.

**Resource trailer.** When the writer knows its workload's identity (the resource's
``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.container.name``, ``k8s.pod.uid``,
``service.name``: :data:`RESOURCE_KEYS`), the file goes on after the record with
``RESOURCE_MAGIC`` (``b"OTXRES01"``), the length in bytes (a 64-bit word) and that
many bytes of JSON (an object of strings, at most :data:`RESOURCE_MAX_BYTES`). It is written
before the file is renamed into place and never changes; a reader of the record alone
ignores it (:func:`encode_resource`, :func:`decode_resource`).

**Concurrency.** One process writes one file (the file name carries its pid and a random
token); several processes on one device write one file each and the agent reads them all.
The writer never waits: it bumps ``SEQ`` to odd, writes, bumps it to even (a seqlock); a
second thread of the same process that finds the record busy queues its update, which the
thread holding the record applies before it lets go. The reader copies the file and keeps
the copy only if ``SEQ`` was even and unchanged around the copy, else retries. The ordering
of the plain stores relies on the CPU keeping stores in order (x86-64 does); on a weakly
ordered CPU a torn copy is possible but rare, and costs at most one wrong exemplar.

**Lifetime and permissions.** The file is created under a temporary name, filled, locked
with a shared ``flock`` (held for the process's life) and renamed into place, so the agent
never sees a half-made record. It is removed at process exit; a killed process leaves it
behind, and the agent removes it when it can take the lock (nobody holds it any more).
Files are created ``0640`` (owner writes, group reads); the folder is created ``0750``, and
a world-writable folder, or a default folder owned by another user, is refused.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> rec = ActiveSpanRecord("host0/chip0", folder)
>>> rec.started(0xABC, 0x12, 1_000)
>>> snap = decode_record(rec.path.read_bytes())
>>> snap.device_id, [(e.span_id, e.start_ns, e.end_ns) for e in snap.open]
('host0/chip0', [(18, 1000, 0)])
>>> rec.ended(0xABC, 0x12, 1_000, 5_000)
>>> snap = decode_record(rec.path.read_bytes())
>>> snap.open, [(e.trace_id, e.end_ns) for e in snap.ring]
([], [(2748, 5000)])
>>> rec.close(); rec.path.exists()
False
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import mmap
import os
import secrets
import stat
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from otel_ext import config

__all__ = [
    "OPEN_SLOTS",
    "RECORD_BYTES",
    "RECORD_WORDS",
    "RESOURCE_KEYS",
    "RING_SLOTS",
    "SUFFIX",
    "ActiveSpanRecord",
    "RecordEntry",
    "RecordSnapshot",
    "decode_record",
    "decode_resource",
    "default_directory",
    "encode_resource",
    "parse_record_name",
    "prepare_directory",
    "record_directory",
    "remove_stale_records",
    "writer_alive",
]

MAGIC = int.from_bytes(b"OTXSPAN1", "little")
VERSION = 1
# header word indices
W_MAGIC, W_VERSION, W_SEQ, W_PID, W_CREATED, W_EVICTED, W_HEAD, W_DROPPED = range(8)
W_DEVICE = 8  # 16 words: the device id, UTF-8, NUL-padded
DEVICE_BYTES = 128
W_OPEN_SLOTS, W_RING_SLOTS, W_ENTRY_WORDS = 24, 25, 26
W_UUID = 27  # 5 words: the device UUID, ASCII, NUL-padded
UUID_BYTES = 40
HEADER_WORDS = 32
ENTRY_WORDS = 5  # trace_hi, trace_lo, span_id, start_ns, end_ns
OPEN_SLOTS = 16
RING_SLOTS = 256
OPEN_BASE = HEADER_WORDS
RING_BASE = OPEN_BASE + OPEN_SLOTS * ENTRY_WORDS
RECORD_WORDS = RING_BASE + RING_SLOTS * ENTRY_WORDS
RECORD_BYTES = RECORD_WORDS * 8
SUFFIX = ".span"
_pack_entry = struct.Struct(f"={ENTRY_WORDS}Q").pack_into
_OPEN_OFFSETS = [(OPEN_BASE + i * ENTRY_WORDS) * 8 for i in range(OPEN_SLOTS)]
_OPEN_SPAN_WORDS = [OPEN_BASE + i * ENTRY_WORDS + 2 for i in range(OPEN_SLOTS)]
_RING_OFFSETS = [(RING_BASE + i * ENTRY_WORDS) * 8 for i in range(RING_SLOTS)]
_RING_END_WORDS = [RING_BASE + i * ENTRY_WORDS + 4 for i in range(RING_SLOTS)]
RESOURCE_MAGIC = b"OTXRES01"
RESOURCE_MAX_BYTES = 4096
#: the resource attributes a record carries (the workload's pod identity)
RESOURCE_KEYS = (
    "k8s.pod.name",
    "k8s.namespace.name",
    "k8s.container.name",
    "k8s.pod.uid",
    "service.name",
)
FILE_MODE = 0o640
DIR_MODE = 0o750
_MASK64 = (1 << 64) - 1


def default_directory(env: Mapping[str, str] | None = None) -> Path:
    """The folder used when ``OTEL_EXT_ACTIVE_SPAN_DIR`` is unset.

    ``$XDG_RUNTIME_DIR/otel-ext`` (a per-user tmpfs on systemd hosts), else
    ``/tmp/otel-ext-$UID``.

    >>> str(default_directory({"XDG_RUNTIME_DIR": "/run/user/1000"}))
    '/run/user/1000/otel-ext'
    """
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR", "").strip()
    if runtime:
        return Path(runtime) / "otel-ext"
    return Path("/tmp") / f"otel-ext-{os.getuid()}"


def record_directory(
    directory: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None
) -> Path:
    """The records' folder: ``directory``, else ``OTEL_EXT_ACTIVE_SPAN_DIR``, else the default.

    >>> str(record_directory(env={"OTEL_EXT_ACTIVE_SPAN_DIR": "/var/run/otel-ext"}))
    '/var/run/otel-ext'
    """
    chosen = config.resolve(
        config.ACTIVE_SPAN_DIR, None if directory is None else str(directory), env=env
    )
    return Path(chosen) if chosen else default_directory(env)


def prepare_directory(directory: Path, *, default: bool = False) -> Path:
    """Create ``directory`` (mode ``0750``) if needed and check it is safe to publish in.

    Args:
        directory: the folder.
        default: it is the default folder: it must then belong to this user.

    Returns:
        The folder.

    Raises:
        OSError: it cannot be created, is not a folder, is world-writable, is not writable
            by this process, or (``default``) belongs to another user.
    """
    try:
        directory.mkdir(mode=DIR_MODE, parents=False, exist_ok=False)
        os.chmod(directory, DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(directory, DIR_MODE)
    st = os.lstat(directory) if default else os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{directory}: not a folder")
    if st.st_mode & stat.S_IWOTH:
        raise OSError(f"{directory}: world-writable; refusing to publish active spans there")
    if default and st.st_uid != os.getuid():
        raise OSError(f"{directory}: belongs to uid {st.st_uid}, not to this user")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OSError(f"{directory}: not writable by this process")
    return directory


def remove_stale_records(directory: str | os.PathLike[str]) -> int:
    """Remove the records in ``directory`` whose writer is gone; return how many.

    A record's writer holds a shared ``flock`` on it for its whole life; a record whose
    lock can be taken exclusively has no writer (it was killed before it could clean up).
    Workloads call this when they start, so stale records go even when the node agent may
    only read the folder. Never raises.
    """
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if parse_record_name(entry.name) is None:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live writer
        try:
            if os.lstat(entry.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def encode_resource(attributes: Mapping[str, object]) -> bytes:
    """The resource trailer of a record: the :data:`RESOURCE_KEYS` of ``attributes``.

    Empty (no trailer) when none is set; values longer than 253 characters (the longest
    Kubernetes name) are cut there.

    >>> decode_resource(encode_resource({"k8s.pod.name": "serve-0", "host.name": "n1"}))
    {'k8s.pod.name': 'serve-0'}
    >>> encode_resource({})
    b''
    """
    kept = {
        k: str(attributes[k])[:253] for k in RESOURCE_KEYS if attributes.get(k) not in (None, "")
    }
    if not kept:
        return b""
    body = json.dumps(kept, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return RESOURCE_MAGIC + len(body).to_bytes(8, "little") + body


def decode_resource(data: bytes) -> dict[str, str]:
    """The attributes of a resource trailer (the bytes after the record); ``{}`` when there
    is none or it is not a well-formed one (never raises).

    >>> decode_resource(b"OTXRES01" + (99).to_bytes(8, "little") + b"{}")
    {}
    """
    if len(data) < 16 or data[:8] != RESOURCE_MAGIC:
        return {}
    size = int.from_bytes(data[8:16], "little")
    if size > RESOURCE_MAX_BYTES or len(data) < 16 + size:
        return {}
    try:
        got = json.loads(data[16 : 16 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(got, dict):
        return {}
    return {k: v for k, v in got.items() if k in RESOURCE_KEYS and isinstance(v, str)}


def record_name(device_id: str, pid: int, token: str) -> str:
    """The file name of one process's record for ``device_id``.

    >>> record_name("host0/chip1", 42, "ab12")
    'host0%2Fchip1.42.ab12.span'
    """
    return f"{quote(device_id, safe='')}.{pid}.{token}{SUFFIX}"


def parse_record_name(name: str) -> tuple[str, int] | None:
    """``(device_id, pid)`` of a record file name, or ``None`` if it is not one.

    >>> parse_record_name("host0%2Fchip1.42.ab12.span"), parse_record_name(".tmp.span")
    (('host0/chip1', 42), None)
    """
    if name.startswith(".") or not name.endswith(SUFFIX):
        return None
    parts = name[: -len(SUFFIX)].rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdecimal():
        return None
    return unquote(parts[0]), int(parts[1])


@dataclass(frozen=True, slots=True)
class RecordEntry:
    """One span in a record (times in ns since the epoch; ``end_ns`` 0 while it runs)."""

    trace_id: int
    span_id: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class RecordSnapshot:
    """A consistent copy of one record.

    Attributes:
        device_id: the device.
        device_uuid: its UUID (``GPU-...``), or ``""`` when the writer did not know it.
        pid: the writing process (in its own pid namespace).
        created_ns: when the record was created.
        evicted_end_ns: the latest end of an entry the ring overwrote: before this time
            the ring no longer holds every span.
        dropped: starts that found no free open slot.
        open: the spans running now, oldest start first.
        ring: the spans that ended and are still held, oldest first.
    """

    device_id: str
    device_uuid: str
    pid: int
    created_ns: int
    evicted_end_ns: int
    dropped: int
    open: list[RecordEntry]
    ring: list[RecordEntry]


def _entry(words: memoryview, base: int) -> RecordEntry | None:
    span_id = words[base + 2]
    if span_id == 0:
        return None
    trace_id = (words[base] << 64) | words[base + 1]
    start, end = words[base + 3], words[base + 4]
    if trace_id == 0 or (end and end < start):
        return None  # not a span a writer could have written (a torn copy): skipped
    return RecordEntry(trace_id, span_id, start, end)


def decode_record(data: bytes | bytearray | memoryview) -> RecordSnapshot | None:
    """Decode a copy of a record file; ``None`` if it is not a complete, settled record.

    Not settled: the writer was updating it (``SEQ`` odd); the caller reads again.
    """
    if len(data) < RECORD_BYTES:
        return None
    words = memoryview(data)[:RECORD_BYTES].cast("Q")
    if (
        words[W_MAGIC] != MAGIC
        or words[W_VERSION] != VERSION
        or words[W_SEQ] & 1
        or words[W_OPEN_SLOTS] != OPEN_SLOTS
        or words[W_RING_SLOTS] != RING_SLOTS
        or words[W_ENTRY_WORDS] != ENTRY_WORDS
    ):
        return None
    raw_dev = bytes(words[W_DEVICE : W_DEVICE + DEVICE_BYTES // 8].cast("B"))
    device = raw_dev.split(b"\0", 1)[0].decode("utf-8", "replace")
    raw_uuid = bytes(words[W_UUID : W_UUID + UUID_BYTES // 8].cast("B"))
    uuid = raw_uuid.split(b"\0", 1)[0].decode("ascii", "replace")
    open_entries = [
        e for i in range(OPEN_SLOTS) if (e := _entry(words, OPEN_BASE + i * ENTRY_WORDS))
    ]
    open_entries.sort(key=lambda e: e.start_ns)
    head = words[W_HEAD]
    count = min(head, RING_SLOTS)
    ring: list[RecordEntry] = []
    for k in range(head - count, head):
        e = _entry(words, RING_BASE + (k % RING_SLOTS) * ENTRY_WORDS)
        if e is not None:
            ring.append(e)
    return RecordSnapshot(
        device,
        uuid,
        words[W_PID],
        words[W_CREATED],
        words[W_EVICTED],
        words[W_DROPPED],
        open_entries,
        ring,
    )


class ActiveSpanRecord:
    """The writer of one process's record for one device.

    Threading and blocking contract: :meth:`started` and :meth:`ended` never block and never
    raise on the workload's thread; they cost a few hundred nanoseconds (see
    ``benchmarks/active_span_publish.py``). A thread that finds the record busy (another
    thread of this process is writing it) queues its update for that thread to apply; who
    writes is decided by popping a one-item list (atomic), not by a lock.

    Args:
        device_id: the device (``accel.device.id``).
        directory: the folder (already checked with :func:`prepare_directory`).
        uuid: the device's UUID (``GPU-...``), when known: the agent then matches the
            record to its NVML device even if the names differ.
        resource: the workload's resource attributes; its :data:`RESOURCE_KEYS` (the pod
            identity) are written after the record for the agent's pod labels.
        clock: real-time clock in ns (the creation time).

    Raises:
        OSError: the file cannot be created (the caller disables publishing).
    """

    def __init__(
        self,
        device_id: str,
        directory: str | os.PathLike[str],
        *,
        uuid: str = "",
        resource: Mapping[str, object] | None = None,
        clock=time.time_ns,
    ):
        self.device_id = device_id
        folder = Path(directory)
        pid = os.getpid()
        token = secrets.token_hex(4)
        self.path = folder / record_name(device_id, pid, token)
        tmp = folder / f".{token}.{pid}.tmp"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
        fd = os.open(tmp, flags, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            trailer = encode_resource(resource or {})
            os.ftruncate(fd, RECORD_BYTES + len(trailer))
            if trailer:
                os.pwrite(fd, trailer, RECORD_BYTES)
            self._mm = mmap.mmap(
                fd, RECORD_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
            w = self._words = memoryview(self._mm).cast("Q")
            w[W_VERSION] = VERSION
            w[W_PID] = pid
            w[W_CREATED] = clock()
            w[W_OPEN_SLOTS] = OPEN_SLOTS
            w[W_RING_SLOTS] = RING_SLOTS
            w[W_ENTRY_WORDS] = ENTRY_WORDS
            dev = device_id.encode("utf-8")[: DEVICE_BYTES - 1]
            self._mm[W_DEVICE * 8 : W_DEVICE * 8 + len(dev)] = dev
            raw_uuid = uuid.encode("ascii", "replace")[:UUID_BYTES]
            self._mm[W_UUID * 8 : W_UUID * 8 + len(raw_uuid)] = raw_uuid
            w[W_MAGIC] = MAGIC  # last: a reader accepts the record only from here on
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self._fd = fd
        self._seq = 0
        self._head = 0
        self._evicted = 0
        self._dropped = 0
        self._free = list(range(OPEN_SLOTS - 1, -1, -1))
        self._open: dict[int, int] = {}
        # the writer's token: list.pop() and append() are atomic, so whoever pops it writes
        # (cheaper than a lock's acquire and release on the hot path; never waited for)
        self._token = [True]
        self._pending: collections.deque[tuple[int, int, int, int]] = collections.deque()
        #: updates that found another thread writing and were queued for it
        self.contended = 0
        self.closed = False

    # -- workload side -------------------------------------------------------------------
    def started(self, trace_id: int, span_id: int, start_ns: int) -> None:
        """Span ``span_id`` of ``trace_id`` started at ``start_ns`` on this device."""
        token = self._token
        try:
            token.pop()
        except IndexError:  # another thread of this process is writing
            self._contended((trace_id, span_id, start_ns, -1))
            return
        try:
            if self._pending:
                self._drain()  # earlier updates first (this thread's own among them)
            free = self._free
            if free and not self.closed and span_id not in self._open:
                # the common case, inline: take an open slot, write the entry
                slot = free.pop()
                self._open[span_id] = slot
                w = self._words
                seq = self._seq
                w[W_SEQ] = seq + 1
                _pack_entry(
                    self._mm, _OPEN_OFFSETS[slot], trace_id >> 64, trace_id & _MASK64,
                    span_id, start_ns, 0,
                )  # fmt: skip
                w[W_SEQ] = self._seq = seq + 2
            else:
                self._start(trace_id, span_id, start_ns)
        finally:
            token.append(True)
        if self._pending:
            self._contended(None)

    def ended(self, trace_id: int, span_id: int, start_ns: int, end_ns: int) -> None:
        """Span ``span_id`` ended at ``end_ns`` (it moves from the open slots to the ring)."""
        token = self._token
        try:
            token.pop()
        except IndexError:
            self._contended((trace_id, span_id, start_ns, end_ns))
            return
        try:
            if self._pending:
                self._drain()
            self._end(trace_id, span_id, start_ns, end_ns)
        finally:
            token.append(True)
        if self._pending:
            self._contended(None)

    def _contended(self, update: tuple[int, int, int, int] | None) -> None:
        """Queue ``update`` (if any); apply the queue if the writing thread let go meanwhile.

        The queue never waits for the writer: a thread that cannot take the token after
        queueing knows another holds it, and every holder applies the queue after letting
        go (the check after ``token.append``), so nothing queued stays behind.
        """
        token, pending = self._token, self._pending
        if update is not None:
            if self.closed:
                return
            pending.append(update)
            self.contended += 1
        while pending:
            try:
                token.pop()
            except IndexError:
                return  # the holder applies it
            try:
                self._drain()
            finally:
                token.append(True)

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            trace_id, span_id, start_ns, end_ns = pending.popleft()
            if end_ns < 0:
                self._start(trace_id, span_id, start_ns)
            else:
                self._end(trace_id, span_id, start_ns, end_ns)

    def _start(self, trace_id: int, span_id: int, start_ns: int) -> None:
        if self.closed:
            return
        w = self._words
        seq = self._seq
        free = self._free
        if not free or span_id in self._open:
            self._dropped += 1
            w[W_SEQ] = seq + 1
            w[W_DROPPED] = self._dropped
            w[W_SEQ] = self._seq = seq + 2
            return
        slot = free.pop()
        self._open[span_id] = slot
        w[W_SEQ] = seq + 1
        _pack_entry(
            self._mm, _OPEN_OFFSETS[slot], trace_id >> 64, trace_id & _MASK64, span_id, start_ns, 0
        )
        w[W_SEQ] = self._seq = seq + 2

    def _end(self, trace_id: int, span_id: int, start_ns: int, end_ns: int) -> None:
        if self.closed:
            return
        w = self._words
        seq = self._seq
        w[W_SEQ] = seq + 1
        slot = self._open.pop(span_id, None)
        if slot is not None:
            w[_OPEN_SPAN_WORDS[slot]] = 0
            self._free.append(slot)
        head = self._head
        ring = head % RING_SLOTS
        if head >= RING_SLOTS:
            old_end = w[_RING_END_WORDS[ring]]
            if old_end > self._evicted:
                self._evicted = old_end
                w[W_EVICTED] = old_end
        _pack_entry(
            self._mm,
            _RING_OFFSETS[ring],
            trace_id >> 64,
            trace_id & _MASK64,
            span_id,
            start_ns,
            end_ns,
        )
        self._head = w[W_HEAD] = head + 1
        w[W_SEQ] = self._seq = seq + 2

    # -- control -------------------------------------------------------------------------
    def close(self, *, unlink: bool = True) -> None:
        """Stop writing; remove the file (``unlink``) and release the lock. Never raises."""
        if self.closed:
            return
        self.closed = True  # writers that start from now on do nothing
        for _ in range(1000):  # wait (at most about a second) for a writer in progress
            try:
                self._token.pop()
                break
            except IndexError:
                time.sleep(0.001)
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        try:
            self._words.release()
            self._mm.close()
        except (BufferError, ValueError):
            pass
        try:
            os.close(self._fd)
        except OSError:
            pass

    def forget_after_fork(self) -> None:
        """In a forked child: drop this (the parent's) record without touching its file."""
        self.closed = True
        self._token = [True]
        try:
            os.close(self._fd)  # the parent's lock stays: it holds its own descriptor
        except OSError:
            pass


def writer_alive(fd: int) -> bool:
    """Whether a writer still holds a record file's shared lock (open ``fd``): taking the lock
    exclusively fails while it does. A record whose writer is gone is stale (a killed process)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    return False
