"""The node agent's side of the active-span records: which span ran most of an interval on D.

:class:`SharedActiveSpanReader` reads the records that workload processes on this host
publish (:mod:`otel_ext.instrumentation.active_span_record`) and answers, for device ``D``
and a sampling interval ``[t0, t1]``, the span that covered the most of it
(:meth:`~SharedActiveSpanReader.covering`). The bridge asks it once per device per round and
attaches the answer as the exemplar of D's counters and histogram buckets.

Which records are D's: those naming D, those carrying D's UUID (``device_uuids``, which
the agent fills from NVML: a container's ``cuda:0`` is not always the host's GPU 0), and,
for records without a UUID, those naming the same host and index under another of the
usual names (``gpuN``, ``cuda:N``, ``cudaN``, ``chipN``).

"Covered" means *running*: at each instant the span running on D in one process is the
innermost one, the open span that started last (a layer inside a step, a collective inside a
layer), so nested spans are not all credited with their parents' time
(:func:`running_time`). With several processes on one device, each record is scored on its
own and the best span over all of them wins. When more spans ended in the interval than a
record's ring holds, the score covers the part of the interval the ring still holds
(after ``evicted_end_ns``).

The reader never writes a record. It opens new files each round, forgets removed ones,
and removes a record whose writer is gone (killed, so it could not clean up) when it can
take the file's lock, if it may. An agent started before, after or restarted during a
workload sees the same records. Reading never raises.

>>> import tempfile
>>> from otel_ext.instrumentation.active_span_record import ActiveSpanRecord
>>> folder = tempfile.mkdtemp()
>>> rec = ActiveSpanRecord("h/chip0", folder)
>>> rec.started(0xA, 0x1, 0); rec.started(0xA, 0x2, 10); rec.ended(0xA, 0x2, 10, 90)
>>> reader = SharedActiveSpanReader(folder)
>>> reader.covering("h/chip0", 0, 100).span_id   # span 2 ran 80 of the 100 ns
'0000000000000002'
>>> reader.covering("h/chip0", 90, 200).span_id  # then span 1 again
'0000000000000001'
>>> rec.close(); reader.close()
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import logging
import mmap
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from otel_ext.counters._exemplars import ExemplarRef
from otel_ext.instrumentation.active_span_record import (
    RECORD_BYTES,
    RESOURCE_MAX_BYTES,
    UUID_BYTES,
    W_SEQ,
    W_UUID,
    RecordEntry,
    RecordSnapshot,
    decode_record,
    decode_resource,
    default_directory,
    parse_record_name,
    record_directory,
    writer_alive,
)

__all__ = ["SharedActiveSpanReader", "best_span", "device_alias", "running_time"]

_log = logging.getLogger(__name__)
_READ_TRIES = 4
_ALIAS = re.compile(r"^(.*)/(?:gpu|cuda:?|chip)(\d+)$")


def device_alias(device_id: str) -> tuple[str, int] | None:
    """``(host, index)`` of a device named ``HOST/gpuN``, ``HOST/cuda:N`` or ``HOST/chipN``.

    >>> device_alias("node1/cuda:3"), device_alias("node1/gpu3"), device_alias("node1/npu3")
    (('node1', 3), ('node1', 3), None)
    """
    found = _ALIAS.match(device_id)
    return None if found is None else (found.group(1), int(found.group(2)))


_alias = device_alias


def running_time(entries: Iterable[RecordEntry], t0: int, t1: int) -> dict[int, int]:
    """Nanoseconds of ``[t0, t1]`` during which each span was the running one, by span id.

    The running span at an instant is the one covering it that started last (ties: the
    one that ends first, the inner one; then the later in ``entries``). Open entries
    (``end_ns`` 0) run until ``t1``.

    >>> E = RecordEntry
    >>> running_time([E(1, 1, 0, 0), E(1, 2, 10, 30), E(1, 3, 20, 25)], 0, 100)
    {1: 80, 2: 15, 3: 5}
    """
    spans = []
    for order, e in enumerate(entries):
        start = max(e.start_ns, t0)
        end = min(e.end_ns if e.end_ns else t1, t1)
        if end > start:
            spans.append((start, end, e.start_ns, order, e.span_id))
    spans.sort()
    totals: dict[int, int] = {}
    heap: list[tuple[int, int, int, int, int]] = []  # (-start, end, -order, end, span_id)
    i, now = 0, t0
    while i < len(spans) or heap:
        while heap and heap[0][3] <= now:
            heapq.heappop(heap)  # ended
        if not heap:
            if i >= len(spans):
                break
            now = max(now, spans[i][0])
        while i < len(spans) and spans[i][0] <= now:
            start, end, raw_start, order, span_id = spans[i]
            heapq.heappush(heap, (-raw_start, end, -order, end, span_id))
            i += 1
        while heap and heap[0][3] <= now:
            heapq.heappop(heap)
        if not heap:
            continue
        nxt = spans[i][0] if i < len(spans) else t1
        top = heap[0]
        until = min(top[3], nxt)
        if until > now:
            totals[top[4]] = totals.get(top[4], 0) + (until - now)
            now = until
    return totals


def best_span(snapshots: Iterable[RecordSnapshot], t0: int, t1: int) -> RecordEntry | None:
    """The span that ran for most of ``[t0, t1]`` over the given records (ties: the latest).

    >>> from otel_ext.instrumentation.active_span_record import RecordSnapshot
    >>> E = RecordEntry
    >>> a = RecordSnapshot("d", "", 1, 0, 0, 0, [], [E(7, 1, 0, 40)])
    >>> b = RecordSnapshot("d", "", 2, 0, 0, 0, [E(8, 2, 30, 0)], [])
    >>> best_span([a, b], 0, 100).trace_id
    8
    """
    best: tuple[int, int] | None = None
    winner: RecordEntry | None = None
    for snap in snapshots:
        lo = max(t0, snap.evicted_end_ns)
        if lo >= t1:
            lo = t0
        entries = [*snap.ring, *snap.open]
        totals = running_time(entries, lo, t1)
        by_id = {e.span_id: e for e in entries}
        for span_id, ns in totals.items():
            e = by_id[span_id]
            key = (ns, e.start_ns)
            if best is None or key > best:
                best, winner = key, e
    return winner


@dataclass
class _Open:
    fd: int
    mm: mmap.mmap
    device_id: str
    inode: int
    uuid: str
    resource: dict[str, str]


class SharedActiveSpanReader:
    """Reads every active-span record in a folder (see the module docs).

    Args:
        directory: the folder (else ``OTEL_EXT_ACTIVE_SPAN_DIR``, else the default one).
        extra_directories: further folders to read (the agent, run as root, reads other
            users' default folders too: :meth:`default_directories`).
        clock: real-time clock in ns (to decide when to look for stale records).
        reap_interval_s: how often records whose writer is gone are looked for.
        discover: called as often, returns further folders to read (the agent passes
            :meth:`default_directories`, so a user's folder made after it started is read).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        extra_directories: Iterable[str | os.PathLike[str]] = (),
        clock: Callable[[], int] = time.time_ns,
        reap_interval_s: float = 10.0,
        discover: Callable[[], Iterable[str | os.PathLike[str]]] | None = None,
    ):
        dirs = [Path(record_directory(directory)), *map(Path, extra_directories)]
        self._fixed = list(dict.fromkeys(dirs))
        self._discover = discover
        #: ``accel.device.id`` -> device UUID, for matching records by UUID
        self.device_uuids: dict[str, str] = {}
        self._by_uuid: dict[str, list[Path]] = {}
        self._by_alias: dict[tuple[str, int], list[Path]] = {}
        self.directories = list(dict.fromkeys(dirs))
        self._clock = clock
        self._files: dict[Path, _Open] = {}
        self._by_device: dict[str, list[Path]] = {}
        self._scanned_for: tuple[int, int] | None = None
        self._reap_ns = int(reap_interval_s * 1e9)
        self._next_reap = 0
        self.torn_reads = 0
        self.reaped = 0

    @staticmethod
    def default_directories(env: Mapping[str, str] | None = None) -> list[Path]:
        """The folders an agent reads when none is configured.

        Its own default folder, and, when it runs as root, every user's
        (``/run/user/*/otel-ext`` and ``/tmp/otel-ext-*``, each owned by the user it names).
        """
        env = os.environ if env is None else env
        chosen = env.get("OTEL_EXT_ACTIVE_SPAN_DIR", "").strip()
        if chosen:
            return [Path(chosen)]
        out = [default_directory(env)]
        if os.getuid() == 0:
            for pattern_root, prefix in ((Path("/run/user"), None), (Path("/tmp"), "otel-ext-")):
                try:
                    names = sorted(os.listdir(pattern_root))
                except OSError:
                    continue
                for name in names:
                    if prefix is None:
                        cand, uid_text = pattern_root / name / "otel-ext", name
                    elif name.startswith(prefix):
                        cand, uid_text = pattern_root / name, name[len(prefix) :]
                    else:
                        continue
                    try:
                        st = os.lstat(cand)
                    except OSError:
                        continue
                    if (
                        uid_text.isdecimal()
                        and st.st_uid == int(uid_text)
                        and not st.st_mode & 0o002
                    ):
                        out.append(cand)
        return list(dict.fromkeys(out))

    # -- files -----------------------------------------------------------------------------
    def _scan(self) -> None:
        seen: set[Path] = set()
        for folder in self.directories:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                parsed = parse_record_name(entry.name)
                if parsed is None:
                    continue
                path = Path(entry.path)
                seen.add(path)
                if path in self._files:
                    continue
                opened = self._open(path, parsed[0])
                if opened is not None:
                    self._files[path] = opened
        for path in [p for p in self._files if p not in seen]:
            self._forget(path)
        by_device: dict[str, list[Path]] = {}
        by_uuid: dict[str, list[Path]] = {}
        by_alias: dict[tuple[str, int], list[Path]] = {}
        for path, f in self._files.items():
            by_device.setdefault(f.device_id, []).append(path)
            if f.uuid:
                by_uuid.setdefault(f.uuid, []).append(path)
            else:
                alias = _alias(f.device_id)
                if alias is not None:
                    by_alias.setdefault(alias, []).append(path)
        self._by_device, self._by_uuid, self._by_alias = by_device, by_uuid, by_alias

    def _open(self, path: Path, device_id: str) -> _Open | None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size < RECORD_BYTES:
                raise OSError("short record")
            mm = mmap.mmap(fd, RECORD_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            os.close(fd)
            return None
        raw_uuid = mm[W_UUID * 8 : W_UUID * 8 + UUID_BYTES]
        uuid = raw_uuid.split(b"\0", 1)[0].decode("ascii", "replace")
        resource: dict[str, str] = {}
        if st.st_size > RECORD_BYTES:  # the workload's pod identity (written once)
            try:
                resource = decode_resource(os.pread(fd, 16 + RESOURCE_MAX_BYTES, RECORD_BYTES))
            except OSError:
                resource = {}
        return _Open(fd, mm, device_id, st.st_ino, uuid, resource)

    def _forget(self, path: Path) -> None:
        f = self._files.pop(path, None)
        if f is None:
            return
        with contextlib.suppress(OSError, ValueError, BufferError):
            f.mm.close()
        with contextlib.suppress(OSError):
            os.close(f.fd)

    def _reap(self) -> None:
        """Remove records whose writer is gone (nobody holds the file's lock)."""
        for path, f in list(self._files.items()):
            try:
                fcntl.flock(f.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a writer holds it
            try:
                st = os.lstat(path)
                if st.st_ino == f.inode:
                    os.unlink(path)
                    self.reaped += 1
            except OSError:
                pass  # not ours to remove: we only stop reading it
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(f.fd, fcntl.LOCK_UN)
            self._forget(path)

    def _snapshot(self, f: _Open) -> RecordSnapshot | None:
        mm = f.mm
        seq_at = W_SEQ * 8
        for _ in range(_READ_TRIES):
            try:
                before = int.from_bytes(mm[seq_at : seq_at + 8], "little")
                if before & 1:
                    self.torn_reads += 1
                    continue
                data = mm[:RECORD_BYTES]
                after = int.from_bytes(mm[seq_at : seq_at + 8], "little")
            except (ValueError, OSError):
                return None
            if before == after:
                return decode_record(data)
            self.torn_reads += 1
        return None

    def snapshots(self, device_id: str) -> list[RecordSnapshot]:
        """Consistent copies of every record of ``device_id`` (scans the folders first)."""
        self._scan()
        return self._device_snapshots(device_id)

    def _paths(self, device_id: str) -> list[Path]:
        paths = list(self._by_device.get(device_id, ()))
        uuid = self.device_uuids.get(device_id)
        if uuid:
            paths += self._by_uuid.get(uuid, ())
        alias = _alias(device_id)
        if alias is not None:
            paths += self._by_alias.get(alias, ())
        return list(dict.fromkeys(paths))

    def _device_snapshots(self, device_id: str) -> list[RecordSnapshot]:
        out = []
        for path in self._paths(device_id):
            f = self._files.get(path)
            snap = self._snapshot(f) if f is not None else None
            if snap is not None:
                out.append(snap)
        return out

    # -- questions ---------------------------------------------------------------------------
    def covering(self, device_id: str, start_ns: int, end_ns: int) -> ExemplarRef | None:
        """The span that ran for most of ``[start_ns, end_ns]`` on ``device_id``, if any.

        The folders are scanned once per interval, however many devices are asked about.
        """
        try:
            if self._scanned_for != (start_ns, end_ns):
                self._scanned_for = (start_ns, end_ns)
                now = self._clock()
                if now >= self._next_reap:
                    self._next_reap = now + self._reap_ns
                    if self._discover is not None:
                        found = [Path(d) for d in self._discover()]
                        self.directories = list(dict.fromkeys([*self._fixed, *found]))
                    self._scan()
                    self._reap()
                self._scan()
            snaps = self._device_snapshots(device_id)
            if not snaps:
                return None
            winner = best_span(snaps, start_ns, max(end_ns, start_ns + 1))
        except Exception as exc:  # reading must never fail a counter round
            _log.warning("reading active-span records failed: %r", exc)
            return None
        if winner is None:
            return None
        return ExemplarRef(format(winner.trace_id, "032x"), format(winner.span_id, "016x"))

    def resources(self, device_ids: Iterable[str]) -> dict[str, list[dict[str, str]]]:
        """The resource attributes (pod identity) of the live workloads on each device.

        Scans the folders once; a device's records are matched as for :meth:`covering`; a
        record whose writer is gone (nobody holds its lock) counts for nothing. Devices
        without such a workload are left out. Never raises.
        """
        out: dict[str, list[dict[str, str]]] = {}
        try:
            self._scan()
            live: dict[Path, bool] = {}
            for dev in device_ids:
                for path in self._paths(dev):
                    f = self._files.get(path)
                    if f is None or not f.resource:
                        continue
                    if path not in live:
                        live[path] = writer_alive(f.fd)
                    if live[path]:
                        out.setdefault(dev, []).append(dict(f.resource))
        except Exception as exc:  # reading must never fail a counter round
            _log.warning("reading active-span records failed: %r", exc)
        return out

    def devices(self) -> list[str]:
        """Devices with at least one record (as of the last scan)."""
        return sorted(self._by_device)

    def close(self) -> None:
        """Close every file."""
        for path in list(self._files):
            self._forget(path)
        self._by_device = {}
