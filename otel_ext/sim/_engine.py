"""The discrete-event core: requests, continuous batching, kernels, all-reduces, KV transfers.

Everything happens in virtual true time (integer ns, see :mod:`otel_ext.sim._clocks`); nothing
sleeps. Events (request arrivals, engine steps, KV-cache arrivals, counter samples) are
processed in time order from one heap. An engine step is simulated whole when it starts: it
is one continuous-batching iteration of the tensor-parallel group (the chips of one host),
made of ``layer_groups`` groups, each a compute kernel per chip followed by a ring (or mesh)
all-reduce over the chip-to-chip links. A chip's all-reduce kernel starts when its compute
ends and finishes when the slowest link of the collective has delivered, so a slow chip
makes every other chip wait (its *arrival* is last) and a slow link stretches every
all-reduce of its ring. Each chip's part in each all-reduce (enter, last arrival, exit,
bytes) goes to the counter model as it completes.

The engine knows nothing of OpenTelemetry: it reports what happened (with true times) to a
:class:`EngineSink` and feeds the counter model (:mod:`otel_ext.sim._counters`).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from otel_ext.sim._clocks import EPOCH_NS
from otel_ext.sim._config import SimConfig, chip_name, host_name, link_name

__all__ = [
    "CollectiveRecord",
    "Engine",
    "EngineSink",
    "GroupRecord",
    "KvTransfer",
    "LinkTransfer",
    "Request",
    "StepRecord",
]

#: fraction of peak FLOP/s and memory bandwidth a kernel reaches at best
_MFU = 0.65
_MBU = 0.85
#: per-layer kernel launch and sync overhead inside a group (ns)
_LAYER_OVERHEAD_NS = 8_000
#: host scheduling gap between two engine steps (ns)
_STEP_GAP_NS = 150_000
#: frequency drop follows the cooling failure of a throttle fault after this long
_THROTTLE_LAG_NS = 300_000_000

# event kinds, in the order they are handled at equal times
_KV_DONE, _ARRIVAL, _SAMPLE, _STEP = 0, 1, 2, 3


@dataclass
class Request:
    """One inference request and its true timeline (ns)."""

    index: int
    arrival_ns: int
    prompt_tokens: int
    output_tokens: int
    prefill_host: int
    decode_host: int
    prefilled: int = 0
    generated: int = 0
    admitted_ns: int = 0
    prefill_start_ns: int = 0
    first_token_ns: int = 0
    prefill_steps: list[int] = field(default_factory=list)
    kv_start_ns: int = 0
    kv_end_ns: int = 0
    decode_start_ns: int = 0
    done_ns: int = 0
    decode_steps: int = 0
    batch_sizes: int = 0
    first_decode_end_ns: int = 0
    #: true accelerator time (chip-ns) and dynamic + idle energy (J) of this request's share
    #: of every step that served it (its share of the step's arithmetic)
    accel_ns: float = 0.0
    energy_j: float = 0.0

    @property
    def request_id(self) -> str:
        """The server-side id, ``req-000012``."""
        return f"req-{self.index:06d}"


@dataclass
class LinkTransfer:
    """Bytes one chip sent over one link during one all-reduce (one direction)."""

    link: str
    src_chip: int
    dst_chip: int
    start_ns: int
    end_ns: int
    nbytes: int


@dataclass
class GroupRecord:
    """One layer group of one step on one TP group: compute per chip, then the all-reduce."""

    index: int
    start_ns: int
    compute_end_ns: list[int]
    ar_start_ns: int
    ar_end_ns: int
    flops_per_chip: float
    bytes_per_chip: float
    ar_bytes: int
    seq: int
    transfers: list[LinkTransfer]


class _GroupWork(NamedTuple):
    """One layer group's work per chip in a step, and its all-reduce."""

    layers: float  # model layers per group
    flops_chip: float
    read_chip: float  # bytes read
    write_chip: float  # bytes written
    ar_bytes: int  # the all-reduce buffer
    n_coll: int  # all-reduces the group stands for (two per layer)


@dataclass
class StepRecord:
    """One engine step (continuous-batching iteration) of one host."""

    host: int
    step: int
    start_ns: int
    end_ns: int
    prefill: list[tuple[Request, int]]
    decode: list[Request]
    groups: list[GroupRecord]
    #: chip-ns the step kept its chips busy, and the energy it took (J, idle power included)
    device_ns: int = 0
    energy_j: float = 0.0

    @property
    def batch_size(self) -> int:
        """Requests served by this step."""
        return len(self.prefill) + len(self.decode)


@dataclass
class CollectiveRecord:
    """True times of one all-reduce, for ``truth.json``."""

    collective_id: str
    host: int
    start_ns: int
    end_ns: int
    arrivals_ns: list[int]
    nbytes: int = 0


@dataclass
class KvTransfer:
    """A KV-cache transfer over the NICs between a prefill and a decode host."""

    request: Request
    src_host: int
    dst_host: int
    start_ns: int
    end_ns: int
    nbytes: int


class EngineSink(Protocol):
    """Receives what the engine simulated, in time order of step starts."""

    def on_step(self, record: StepRecord) -> None: ...

    def on_kv_transfer(self, transfer: KvTransfer) -> None: ...

    def on_request_done(self, request: Request) -> None: ...

    def on_sample(self, now_ns: int) -> None: ...


class CounterFeed(Protocol):
    """What the engine reports to the counter model."""

    def add_compute(
        self,
        chip: int,
        start_ns: int,
        end_ns: int,
        *,
        flops: float,
        read_bytes: float,
        written_bytes: float,
        tensor_fraction: float,
        clock_ratio: float,
        kernels: int,
    ) -> float: ...

    def add_comm(self, chip: int, start_ns: int, end_ns: int, *, clock_ratio: float) -> float: ...

    def add_collective(
        self,
        chip: int,
        *,
        group: str,
        op: str,
        group_size: int,
        enter_ns: int,
        last_arrival_ns: int,
        exit_ns: int,
        nbytes: int,
    ) -> None: ...

    def add_link(
        self, link: str, direction: str, start_ns: int, end_ns: int, nbytes: int
    ) -> None: ...

    def add_nic(
        self, host: int, direction: str, start_ns: int, end_ns: int, nbytes: int, *, errors: int = 0
    ) -> None: ...

    def add_tokens(self, host: int, token_type: str, count: int, at_ns: int) -> None: ...

    def add_request_done(self, host: int, at_ns: int) -> None: ...

    def set_kv_tokens(self, host: int, tokens: int, at_ns: int) -> None: ...

    def set_queue_depth(self, host: int, depth: int, at_ns: int) -> None: ...


@dataclass
class _Host:
    index: int
    role: str  # "prefill", "decode" or "both"
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    free_at: int = EPOCH_NS
    scheduled: bool = False
    step: int = 0
    seq: int = 0
    nic_tx_free: int = EPOCH_NS
    nic_rx_free: int = EPOCH_NS


class Engine:
    """Simulate the cluster serving ``config.requests`` requests; see the module docstring.

    Args:
        config: the validated configuration.
        specs: the chip's peak specifications (the registry's device-spec row).
        sink: receives steps, transfers, finished requests and sample ticks.
        counters: the counter model fed with the work done.
        progress: called with (requests done, requests total, virtual seconds) now and then.
    """

    def __init__(
        self,
        config: SimConfig,
        specs: dict[str, float],
        sink: EngineSink,
        counters: CounterFeed,
        *,
        progress: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.config = config
        self.specs = specs
        self.sink = sink
        self.counters = counters
        self.progress = progress
        self.mode = config.resolved_mode()
        n_hosts = config.hosts
        if self.mode == "disaggregated":
            n_prefill = (n_hosts + 1) // 2
            roles = ["prefill"] * n_prefill + ["decode"] * (n_hosts - n_prefill)
        else:
            roles = ["both"] * n_hosts
        self.hosts = [_Host(i, role) for i, role in enumerate(roles)]
        # one random stream per host: a fault on one host never reshuffles another's jitter
        self.rngs = [random.Random(f"engine:{config.seed}:{i}") for i in range(n_hosts)]
        self.prefill_pool = [h.index for h in self.hosts if h.role in ("prefill", "both")]
        self.decode_pool = [h.index for h in self.hosts if h.role in ("decode", "both")]
        self.expected_run_ns = int(config.requests / config.arrival_rate * 1e9)
        self._faults()
        self.requests: list[Request] = []
        self.collectives: list[CollectiveRecord] = []
        self.kv_transfers: list[KvTransfer] = []
        self.done = 0
        self._step_joules = 0.0
        self.end_ns = EPOCH_NS
        self._heap: list[tuple[int, int, int, int]] = []
        self._order = 0

    # -- faults ---------------------------------------------------------------------------
    def _faults(self) -> None:
        cfg = self.config
        self.compute_factor: dict[tuple[int, int], float] = {}
        self.throttle: dict[tuple[int, int], tuple[int, int, float]] = {}
        self.link_factor: dict[str, float] = {}
        self.nic_factor: dict[int, float] = {}
        onset = EPOCH_NS + int(cfg.throttle_at * self.expected_run_ns)
        for fault in cfg.faults:
            if fault.kind in ("straggler", "throttle"):
                host_s, chip_s = fault.target.split("/")
                key = (int(host_s[4:]), int(chip_s[4:]))
                if fault.kind == "straggler":
                    self.compute_factor[key] = self.compute_factor.get(key, 1.0) * fault.factor
                else:
                    self.throttle[key] = (onset, onset + _THROTTLE_LAG_NS, fault.factor)
            elif fault.kind == "slow-link":
                self.link_factor[fault.target] = fault.factor
            else:
                self.nic_factor[int(fault.target[4:])] = fault.factor

    def clock_ratio(self, host: int, chip: int, at_ns: int) -> float:
        """The chip's core clock as a fraction of its maximum at ``at_ns``."""
        throttle = self.throttle.get((host, chip))
        if throttle is None or at_ns < throttle[1]:
            return 1.0
        return throttle[2]

    def cooling_failed_at(self, host: int, chip: int) -> int | None:
        """When a throttle fault's cooling failure starts on this chip (None: never)."""
        throttle = self.throttle.get((host, chip))
        return None if throttle is None else throttle[0]

    # -- event queue ----------------------------------------------------------------------
    def _push(self, at_ns: int, kind: int, ref: int) -> None:
        self._order += 1
        heapq.heappush(self._heap, (at_ns, kind, self._order, ref))

    def _make_requests(self) -> None:
        cfg = self.config
        rng = random.Random(f"requests:{cfg.seed}")
        t = float(EPOCH_NS) + 5e6
        for i in range(cfg.requests):
            t += rng.expovariate(cfg.arrival_rate) * 1e9
            prompt = max(
                8,
                min(
                    8 * cfg.prompt_tokens_mean,
                    int(rng.lognormvariate(0, 0.6) * cfg.prompt_tokens_mean * 0.84),
                ),
            )
            output = max(
                2,
                min(
                    8 * cfg.output_tokens_mean, int(rng.expovariate(1 / cfg.output_tokens_mean)) + 2
                ),
            )
            req = Request(
                index=i,
                arrival_ns=int(t),
                prompt_tokens=prompt,
                output_tokens=output,
                prefill_host=self.prefill_pool[i % len(self.prefill_pool)],
                decode_host=self.decode_pool[i % len(self.decode_pool)],
            )
            self.requests.append(req)
            self._push(req.arrival_ns, _ARRIVAL, i)

    def run(self) -> None:
        """Simulate until every request is done, then take a last counter sample."""
        self._make_requests()
        interval = int(self.config.counter_interval_ms * 1e6)
        next_sample = EPOCH_NS
        self._push(next_sample, _SAMPLE, 0)
        total = len(self.requests)
        while self._heap:
            at, kind, _, ref = heapq.heappop(self._heap)
            if kind == _SAMPLE:
                self.sink.on_sample(at)
                if self.done < total or at < self.end_ns:
                    self._push(at + interval, _SAMPLE, 0)
                else:
                    self.end_ns = at
                if self.progress is not None:
                    self.progress(self.done, total, (at - EPOCH_NS) / 1e9)
                continue
            if kind == _ARRIVAL:
                req = self.requests[ref]
                host = self.hosts[req.prefill_host]
                host.waiting.append(req)
                self.counters.set_queue_depth(host.index, len(host.waiting), at)
                self._wake(host, at)
            elif kind == _KV_DONE:
                req = self.requests[ref]
                host = self.hosts[req.decode_host]
                host.waiting.append(req)
                self._wake(host, at)
            else:
                host = self.hosts[ref]
                host.scheduled = False
                self._step(host, at)

    def _wake(self, host: _Host, at_ns: int) -> None:
        if not host.scheduled:
            host.scheduled = True
            self._push(max(at_ns, host.free_at), _STEP, host.index)

    # -- one engine step --------------------------------------------------------------------
    def _step(self, host: _Host, now: int) -> None:
        """One engine step on ``host`` at ``now``: admit work, run its layer groups, report
        the step, then account its tokens and schedule the next step."""
        prefill, decode = self._admit(host, now)
        if not prefill and not decode:
            return
        host.step += 1
        self._step_joules = 0.0
        groups, end = self._run_groups(host, now, prefill, decode)
        device_ns = self.config.chips * (end - now)
        # the truth of a step's energy: its work's dynamic energy plus its chips' idle power
        # over the step (the counter model's idle power, when it has one)
        idle_w = float(getattr(self.counters, "idle_power", 0.0))
        energy = self._step_joules + self.config.chips * idle_w * (end - now) / 1e9
        record = StepRecord(
            host.index, host.step, now, end, prefill, decode, groups, device_ns, energy
        )
        for req, share in self._work_shares(prefill, decode):
            req.accel_ns += share * device_ns
            req.energy_j += share * energy
        # the step is reported before the requests it finished (their telemetry may need it)
        self.sink.on_step(record)
        # token accounting at the end of the step
        n_in = self._finish_prefill(host, prefill, end)
        self._finish_decode(host, decode, end)
        self._count_tokens(host, prefill, decode, n_in, end)
        host.free_at = end + _STEP_GAP_NS
        if host.waiting or host.running:
            host.scheduled = True
            self._push(host.free_at, _STEP, host.index)

    def _admit(self, host: _Host, now: int) -> tuple[list[tuple[Request, int]], list[Request]]:
        """The step's work: the running requests to decode (and, on a decode host, waiting
        ones admitted into free batch slots), or the prefill chunks within the token budget."""
        cfg = self.config
        prefill: list[tuple[Request, int]] = []
        decode: list[Request] = []
        if host.role in ("decode", "both"):
            decode = list(host.running[: cfg.max_batch])
        if host.role == "decode":
            while host.waiting and len(host.running) + len(prefill) < cfg.max_batch:
                req = host.waiting.popleft()
                req.decode_start_ns = now
                host.running.append(req)
                decode.append(req)
            return prefill, decode
        budget = cfg.prefill_chunk - len(decode)
        slots = cfg.max_batch - len(host.running) if host.role == "both" else cfg.max_batch
        for taken, req in enumerate(list(host.waiting)):
            if budget <= 0 or taken >= slots:
                break
            chunk = min(budget, req.prompt_tokens - req.prefilled)
            if req.prefilled == 0:
                req.admitted_ns = now
                req.prefill_start_ns = now
            prefill.append((req, chunk))
            budget -= chunk
        return prefill, decode

    def _finish_prefill(self, host: _Host, prefill: list[tuple[Request, int]], end: int) -> int:
        """The prefill chunks done at ``end``: a fully prefilled request has its first token
        and goes to its decode host, finishes, or starts decoding here; the input tokens."""
        n_in = 0
        for req, chunk in prefill:
            req.prefilled += chunk
            req.prefill_steps.append(host.step)
            n_in += chunk
            if req.prefilled >= req.prompt_tokens:
                host.waiting.remove(req)
                req.first_token_ns = end
                req.generated = 1
                if self.mode == "disaggregated":
                    self._send_kv(req, end)
                elif req.generated >= req.output_tokens:
                    self._finish(req, host, end)
                else:
                    req.decode_start_ns = end
                    host.running.append(req)
        return n_in

    def _finish_decode(self, host: _Host, decode: list[Request], end: int) -> None:
        """One more token for each decoded request; those with all their tokens finish."""
        finished = []
        for req in decode:
            req.generated += 1
            req.decode_steps += 1
            if req.decode_steps == 1:
                req.first_decode_end_ns = end
            req.batch_sizes += len(decode)
            if req.generated >= req.output_tokens:
                finished.append(req)
        for req in finished:
            host.running.remove(req)
            self._finish(req, host, end)

    def _count_tokens(
        self,
        host: _Host,
        prefill: list[tuple[Request, int]],
        decode: list[Request],
        n_in: int,
        end: int,
    ) -> None:
        """The step's input and output tokens, KV-cache tokens and queue depth, into the
        counter model."""
        if n_in:
            self.counters.add_tokens(host.index, "input", n_in, end)
        n_out = len(decode) + sum(1 for req, _ in prefill if req.first_token_ns == end)
        if n_out:
            self.counters.add_tokens(host.index, "output", n_out, end)
        kv_tokens = sum(r.prompt_tokens + r.generated for r in host.running)
        self.counters.set_kv_tokens(host.index, kv_tokens, end)
        self.counters.set_queue_depth(host.index, len(host.waiting), end)

    def _work_shares(
        self, prefill: list[tuple[Request, int]], decode: list[Request]
    ) -> list[tuple[Request, float]]:
        """Each request's share of a step's arithmetic (the truth of per-request accounting):
        its tokens through the weights plus its attention over its context, the terms the
        step's FLOP count is made of (see :meth:`_run_groups`). Called before the step's
        token accounting, so ``prefilled`` is the context before this chunk."""
        model = self.config.model
        weights = 2.0 * model.parameters
        attn = 4.0 * model.layers * model.hidden
        work: list[tuple[Request, float]] = []
        for r, chunk in prefill:
            work.append((r, weights * chunk + attn * chunk * (r.prefilled + chunk / 2)))
        for r in decode:
            work.append((r, weights + attn * (r.prompt_tokens + r.generated)))
        total = sum(w for _, w in work)
        return [(r, w / total) for r, w in work] if total > 0 else []

    def _finish(self, req: Request, host: _Host, at_ns: int) -> None:
        req.done_ns = at_ns
        self.done += 1
        self.end_ns = max(self.end_ns, at_ns)
        self.counters.add_request_done(req.prefill_host, at_ns)
        self.sink.on_request_done(req)

    def _send_kv(self, req: Request, at_ns: int) -> None:
        src, dst = self.hosts[req.prefill_host], self.hosts[req.decode_host]
        nbytes = req.prompt_tokens * self.config.model.kv_bytes_per_token
        bw = self.specs["nic_bandwidth"] * 0.9
        bw = min(bw * self.nic_factor.get(src.index, 1.0), bw * self.nic_factor.get(dst.index, 1.0))
        start = max(at_ns, src.nic_tx_free, dst.nic_rx_free)
        end = start + self.config.nic_latency_ns + int(nbytes / bw * 1e9)
        src.nic_tx_free = dst.nic_rx_free = end
        req.kv_start_ns, req.kv_end_ns = start, end
        transfer = KvTransfer(req, src.index, dst.index, start, end, nbytes)
        self.kv_transfers.append(transfer)
        self.counters.add_nic(
            src.index, "transmit", start, end, nbytes, errors=self._port_errors(src.index, nbytes)
        )
        self.counters.add_nic(
            dst.index, "receive", start, end, nbytes, errors=self._port_errors(dst.index, nbytes)
        )
        self.sink.on_kv_transfer(transfer)
        self._push(end, _KV_DONE, req.index)

    def _port_errors(self, host: int, nbytes: int) -> int:
        """Link-level errors a host's port counts while moving ``nbytes``.

        A healthy port counts none; a degraded one (the slow-nic fault: a bad cable or
        optic, a link renegotiated down) retransmits a share of its 4 KiB frames that grows
        as its bandwidth falls, as real ports do. Deterministic for a given transfer.
        """
        factor = self.nic_factor.get(host, 1.0)
        if factor >= 1.0:
            return 0
        frames = nbytes / 4096
        return round(frames * 0.02 * (1.0 - factor))

    def _links(self, host: int) -> list[tuple[int, int]]:
        n = self.config.chips
        if n < 2:
            return []
        if n == 2:
            return [(0, 1)]
        if self.config.topology == "ring":
            return [(c, (c + 1) % n) for c in range(n)]
        return [(a, b) for a in range(n) for b in range(n) if a != b]

    def _run_groups(
        self, host: _Host, now: int, prefill: list[tuple[Request, int]], decode: list[Request]
    ) -> tuple[list[GroupRecord], int]:
        """The step's layer groups one after the other from ``now``: each group's compute on
        every chip, then (with more than one chip) its all-reduce; the groups and the end."""
        work = self._group_work(prefill, decode)
        n = self.config.chips
        t = now
        groups: list[GroupRecord] = []
        for g in range(self.config.layer_groups):
            ends = self._run_compute(host, t, work)
            host.seq += 1
            bytes_chip = work.read_chip + work.write_chip
            if n < 2:
                groups.append(
                    GroupRecord(
                        g, t, ends, ends[0], ends[0], work.flops_chip, bytes_chip, 0, host.seq, []
                    )
                )
                t = ends[0]
                continue
            ar_start, ar_end, transfers = self._run_all_reduce(host, t, ends, work)
            groups.append(
                GroupRecord(
                    g,
                    t,
                    ends,
                    ar_start,
                    ar_end,
                    work.flops_chip,
                    bytes_chip,
                    work.ar_bytes,
                    host.seq,
                    transfers,
                )
            )
            t = ar_end
        return groups, t

    def _group_work(self, prefill: list[tuple[Request, int]], decode: list[Request]) -> _GroupWork:
        """One layer group's work per chip for the step's tokens (weights, attention over the
        context, KV-cache reads and writes) and its all-reduce size."""
        model = self.config.model
        n = self.config.chips
        g_count = self.config.layer_groups
        layers = model.layers / g_count
        tokens = sum(chunk for _, chunk in prefill) + len(decode)
        # attention work: token x context pairs
        ctx_pairs: float = sum(r.prompt_tokens + r.generated for r in decode)
        ctx_pairs += sum(chunk * (r.prefilled + chunk / 2) for r, chunk in prefill)
        kv_read = sum(r.prompt_tokens + r.generated for r in decode) * model.kv_bytes_per_token
        kv_read += sum(r.prefilled for r, _ in prefill) * model.kv_bytes_per_token
        kv_write = tokens * model.kv_bytes_per_token
        params_g = model.parameters / g_count
        flops_g = 2.0 * params_g * tokens + 4.0 * layers * model.hidden * ctx_pairs
        read_g = (
            params_g * model.bytes_per_param
            + (kv_read / g_count)
            + tokens * model.hidden * 2 * layers
        )
        write_g = kv_write / g_count + tokens * model.hidden * 2 * layers
        return _GroupWork(
            layers=layers,
            flops_chip=flops_g / n,
            read_chip=read_g / n,
            write_chip=write_g / n,
            ar_bytes=int(tokens * model.hidden * 2 * 2 * layers),
            n_coll=round(2 * layers),
        )

    def _run_compute(self, host: _Host, t: int, work: _GroupWork) -> list[int]:
        """Each chip's compute of one layer group from ``t`` (roofline time at its clock, its
        slowdown, seeded noise), fed to the counter model; each chip's end."""
        spec, n = self.specs, self.config.chips
        rng = self.rngs[host.index]
        ends: list[int] = []
        for c in range(n):
            ratio = self.clock_ratio(host.index, c, t)
            t_flops = work.flops_chip / (spec["peak_flops_bf16"] * _MFU * ratio)
            t_mem = work.read_chip / (spec["memory_bandwidth"] * _MBU) + work.write_chip / (
                spec["memory_bandwidth"] * _MBU
            )
            base = max(t_flops, t_mem) * 1e9 + _LAYER_OVERHEAD_NS * work.layers
            dur = base * self.compute_factor.get((host.index, c), 1.0)
            dur *= math.exp(rng.gauss(0.0, 0.02))
            dur_ns = max(1_000, int(dur))
            ends.append(t + dur_ns)
            tensor = min(1.0, t_flops * 1e9 / dur_ns)
            self._step_joules += self.counters.add_compute(
                host.index * n + c,
                t,
                t + dur_ns,
                flops=work.flops_chip,
                read_bytes=work.read_chip,
                written_bytes=work.write_chip,
                tensor_fraction=tensor,
                clock_ratio=ratio,
                kernels=round(work.layers * 8),
            )
        return ends

    def _run_all_reduce(
        self, host: _Host, t: int, ends: list[int], work: _GroupWork
    ) -> tuple[int, int, list[LinkTransfer]]:
        """A layer group's all-reduce, once the last chip arrives: its link transfers, each
        chip's wait and the collective, fed to the counter model and recorded; its start,
        end and transfers."""
        n = self.config.chips
        ar_start = max(ends)
        transfers, slowest = self._link_transfers(host, ar_start, work)
        ar_end = ar_start + slowest + 5_000
        group_name = f"{host_name(host.index)}/tp"
        for c in range(n):
            self._step_joules += self.counters.add_comm(
                host.index * n + c,
                ends[c],
                ar_end,
                clock_ratio=self.clock_ratio(host.index, c, t),
            )
            self.counters.add_collective(
                host.index * n + c,
                group=group_name,
                op="all_reduce",
                group_size=n,
                enter_ns=ends[c],
                last_arrival_ns=ar_start,
                exit_ns=ar_end,
                nbytes=work.ar_bytes,
            )
        cid = f"{group_name}:{host.seq}"
        self.collectives.append(
            CollectiveRecord(cid, host.index, ar_start, ar_end, list(ends), work.ar_bytes)
        )
        return ar_start, ar_end, transfers

    def _link_transfers(
        self, host: _Host, ar_start: int, work: _GroupWork
    ) -> tuple[list[LinkTransfer], int]:
        """The all-reduce's transfers on every link of the host's topology (seeded noise, the
        link's slowdown), fed to the counter model; the transfers and the slowest one's
        duration."""
        cfg, n = self.config, self.config.chips
        rng = self.rngs[host.index]
        transfers: list[LinkTransfer] = []
        if cfg.topology == "ring" or n == 2:
            # bidirectional ring: 2(n-1)/n of the buffer crosses each link, half each way
            per_dir = int((n - 1) / n * work.ar_bytes)
            hops = 2 * (n - 1)
        else:
            per_dir = int(2 * work.ar_bytes / n)
            hops = 2
        slowest = 0
        for a, b in self._links(host.index):
            name = link_name(host.index, a, b)
            bw = self.specs["link_bandwidth"] * self.link_factor.get(name, 1.0)
            dur_ns = hops * work.n_coll * cfg.link_latency_ns + int(per_dir / bw * 1e9)
            dur_ns = int(dur_ns * math.exp(rng.gauss(0.0, 0.01)))
            directions = [(a, b), (b, a)] if (n == 2 or cfg.topology == "ring") else [(a, b)]
            for src, dst in directions:
                transfers.append(LinkTransfer(name, src, dst, ar_start, ar_start + dur_ns, per_dir))
                direction = "transmit" if src < dst else "receive"
                self.counters.add_link(name, direction, ar_start, ar_start + dur_ns, per_dir)
            slowest = max(slowest, dur_ns)
        return transfers, slowest

    def device(self, host: int, chip: int) -> str:
        """The telemetry name of a chip."""
        return chip_name(host, chip)
