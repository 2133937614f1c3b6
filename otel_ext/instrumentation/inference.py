"""Inference-request spans (``gen_ai.*``) and the TTFT / TPOT histograms, with exemplars.

A request is an ``accel.request`` span (kind ``SERVER``) with ``accel.request.phase`` children:
``queue`` (waiting for a slot), ``prefill``, ``decode`` (one span per engine step, per token
or per continuous-batching iteration, or one for the whole decode) and ``kv_transfer``.
Token counts go on the request span (``gen_ai.usage.input_tokens``/``output_tokens``).

Histograms, recorded inside the request span's context so the SDK's default
``trace_based`` exemplar filter attaches the request's trace and span ids as exemplars:

* ``gen_ai.server.time_to_first_token`` — arrival to first output token;
* ``gen_ai.server.time_per_output_token`` — (last token - first token) / (tokens - 1);
* ``gen_ai.server.request.duration`` — arrival to finish.

Buckets are the ones the OpenTelemetry gen-ai conventions advise
(:data:`TTFT_BUCKETS`, :data:`TPOT_BUCKETS`, :data:`DURATION_BUCKETS`).

An engine step (one continuous-batching iteration) is an ``accel.engine.step`` span
(:func:`engine_step`) naming the requests it served and, aligned with them, the prompt and
generated tokens it computed for each, with the step's device busy time when the engine
measures it (device events around the forward). ``otel_ext.analysis.serving.requests`` splits each
step's device time and energy across those requests after the run; :class:`RequestAccounting`
does the same online, so that each request span ends with ``accel.request.device_time_ns``
and ``accel.request.energy``.

Every time is explicit-able (ns since the epoch) so a simulation can drive it; every parent
is explicit-able (``context=``). A request served by several engines (prefill here, decode
there) keeps one trace: :meth:`RequestTrace.carrier` gives W3C ``traceparent`` headers,
:func:`extract_context` turns them back into a parent context on the other engine.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> from opentelemetry.sdk.metrics import MeterProvider
>>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
>>> reader = InMemoryMetricReader()
>>> inst = InferenceInstrumentation(model="tiny", tracer_provider=TracerProvider(),
...                                 meter_provider=MeterProvider(metric_readers=[reader]))
>>> req = inst.start_request("r1", input_tokens=5, start_time=0)
>>> req.queued(end_time=1_000_000)
>>> req.prefill(start_time=1_000_000, end_time=21_000_000)
>>> req.token(time=21_000_000)
>>> req.decode_step(start_time=21_000_000, end_time=31_000_000, step=1)
>>> req.finish(end_time=31_000_000)
>>> req.ttft_s, req.tpot_s, req.output_tokens
(0.021, 0.01, 2)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, get_meter
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode
from opentelemetry.trace import TracerProvider as ApiTracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_ext._accounting import token_shares
from otel_ext.instrumentation._common import INSTRUMENTATION_NAME, get_tracer, log_once
from otel_ext.semconv.attributes import (
    ACCEL_ENGINE_STEP_CHIPS,
    ACCEL_ENGINE_STEP_DECODE_TOKENS,
    ACCEL_ENGINE_STEP_DEVICE_TIME_NS,
    ACCEL_ENGINE_STEP_INDEX,
    ACCEL_ENGINE_STEP_PREFILL_TOKENS,
    ACCEL_ENGINE_STEP_REQUEST_IDS,
    ACCEL_REQUEST_BATCH_SIZE,
    ACCEL_REQUEST_DEVICE_TIME_NS,
    ACCEL_REQUEST_ENERGY,
    ACCEL_REQUEST_ID,
    ACCEL_REQUEST_PHASE,
    ACCEL_REQUEST_STEP,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from otel_ext.semconv.metrics import (
    METRIC_GEN_AI_SERVER_REQUEST_DURATION,
    METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
    METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
)
from otel_ext.semconv.spans import (
    SPAN_ACCEL_ENGINE_STEP,
    SPAN_ACCEL_REQUEST,
    SPAN_ACCEL_REQUEST_PHASE,
)

__all__ = [
    "DURATION_BUCKETS",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
    "InferenceInstrumentation",
    "RequestAccounting",
    "RequestTrace",
    "engine_step",
    "extract_context",
    "inject_context",
    "token_shares",
]

#: ``gen_ai.server.time_to_first_token`` bucket boundaries advised by the conventions (s).
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
#: ``gen_ai.server.time_per_output_token`` bucket boundaries advised by the conventions (s).
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
#: ``gen_ai.server.request.duration`` bucket boundaries advised by the conventions (s).
DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)

_PROPAGATOR = TraceContextTextMapPropagator()


def inject_context(
    carrier: MutableMapping[str, str], context: Context | None = None
) -> MutableMapping[str, str]:
    """Write the W3C ``traceparent`` (and ``tracestate``) of ``context`` into ``carrier``.

    >>> inject_context({}, trace.set_span_in_context(trace.INVALID_SPAN))
    {}
    """
    _PROPAGATOR.inject(carrier, context=context)
    return carrier


def extract_context(carrier: Mapping[str, str]) -> Context:
    """The parent context carried by W3C headers (an empty context when there are none).

    >>> ctx = extract_context({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    >>> format(trace.get_current_span(ctx).get_span_context().trace_id, "032x")
    '0af7651916cd43dd8448eb211c80319c'
    """
    return _PROPAGATOR.extract(carrier)


def _now(t: int | None) -> int:
    return time.time_ns() if t is None else int(t)


class RequestTrace:
    """One request's telemetry; made by :meth:`InferenceInstrumentation.start_request`.

    All methods are safe to call from any thread and never raise.
    """

    def __init__(
        self,
        owner: InferenceInstrumentation,
        span: Span,
        start_ns: int,
        input_tokens: int | None,
        request_id: str = "",
    ):
        self._owner = owner
        self.request_id = request_id
        self.span = span
        self.start_ns = start_ns
        self.input_tokens = input_tokens
        self.output_tokens = 0
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.ttft_s: float | None = None
        self.tpot_s: float | None = None
        self.finished = False
        self._lock = threading.Lock()
        self._ctx = trace.set_span_in_context(span)

    @property
    def context(self) -> Context:
        """The request span's context (the parent for its phases and engine work)."""
        return self._ctx

    def carrier(self) -> dict[str, str]:
        """W3C trace-context headers for handing the request to another engine."""
        return dict(inject_context({}, self._ctx))

    def phase(
        self,
        name: str,
        *,
        start_time: int | None = None,
        end_time: int | None = None,
        step: int | None = None,
        batch_size: int | None = None,
    ) -> Span:
        """Record a finished phase span (``queue``, ``prefill``, ``decode``, ``kv_transfer``)."""
        attrs: dict[str, Any] = {ACCEL_REQUEST_PHASE: name}
        if step is not None:
            attrs[ACCEL_REQUEST_STEP] = int(step)
        if batch_size is not None:
            attrs[ACCEL_REQUEST_BATCH_SIZE] = int(batch_size)
        try:
            start = _now(start_time)
            span = self._owner.tracer.start_span(
                SPAN_ACCEL_REQUEST_PHASE, context=self._ctx, attributes=attrs, start_time=start
            )
            span.end(end_time=max(_now(end_time), start))
            return span
        except Exception as exc:
            log_once("inference.phase", "%s: %s", type(exc).__name__, exc)
            return INVALID_SPAN

    def queued(self, *, end_time: int | None = None) -> None:
        """The request waited in the queue from its arrival until ``end_time`` (now)."""
        self.phase("queue", start_time=self.start_ns, end_time=end_time)

    def prefill(
        self,
        *,
        start_time: int | None = None,
        end_time: int | None = None,
        batch_size: int | None = None,
        step: int | None = None,
    ) -> None:
        """A prefill pass ran over the prompt."""
        self.phase(
            "prefill", start_time=start_time, end_time=end_time, batch_size=batch_size, step=step
        )

    def kv_transfer(self, *, start_time: int | None = None, end_time: int | None = None) -> None:
        """The KV cache moved to another engine."""
        self.phase("kv_transfer", start_time=start_time, end_time=end_time)

    def decode_step(
        self,
        *,
        start_time: int | None = None,
        end_time: int | None = None,
        step: int | None = None,
        batch_size: int | None = None,
        tokens: int = 1,
    ) -> None:
        """One decode iteration that produced ``tokens`` tokens for this request (at its end)."""
        end = _now(end_time)
        self.phase("decode", start_time=start_time, end_time=end, step=step, batch_size=batch_size)
        if tokens:
            self.token(tokens, time=end)

    def token(self, count: int = 1, *, time: int | None = None) -> None:
        """``count`` output tokens were produced at ``time``; the first one records TTFT."""
        t = _now(time)
        with self._lock:
            first = self.first_token_ns is None
            if first:
                self.first_token_ns = t
            self.last_token_ns = t
            self.output_tokens += count
        if first:
            self.ttft_s = (t - self.start_ns) / 1e9
            self._owner._record(self._owner.ttft, self.ttft_s, self._ctx)

    def finish(
        self,
        *,
        end_time: int | None = None,
        output_tokens: int | None = None,
        error: BaseException | str | None = None,
    ) -> None:
        """End the request: token counts, TPOT and duration recorded, span ended (once)."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
        end = _now(end_time)
        if output_tokens is not None:
            self.output_tokens = int(output_tokens)
        try:
            span = self.span
            if self.input_tokens is not None:
                span.set_attribute(GEN_AI_USAGE_INPUT_TOKENS, int(self.input_tokens))
            span.set_attribute(GEN_AI_USAGE_OUTPUT_TOKENS, int(self.output_tokens))
            acc = self._owner.accounting
            got = acc.pop(self.request_id) if acc is not None else None
            if got is not None:
                span.set_attribute(ACCEL_REQUEST_DEVICE_TIME_NS, round(got[0]))
                if got[1] is not None:
                    span.set_attribute(ACCEL_REQUEST_ENERGY, float(got[1]))
            if error is not None:
                kind = error if isinstance(error, str) else type(error).__qualname__
                span.set_attribute(ERROR_TYPE, kind)
                span.set_status(Status(StatusCode.ERROR, str(error)))
            elif (
                self.first_token_ns is not None
                and self.last_token_ns is not None
                and self.output_tokens > 1
            ):
                self.tpot_s = (
                    (self.last_token_ns - self.first_token_ns) / 1e9 / (self.output_tokens - 1)
                )
                self._owner._record(self._owner.tpot, self.tpot_s, self._ctx)
            self._owner._record(self._owner.duration, (end - self.start_ns) / 1e9, self._ctx, error)
            span.end(end_time=max(end, self.start_ns))
        except Exception as exc:
            log_once("inference.finish", "%s: %s", type(exc).__name__, exc)


class InferenceInstrumentation:
    """Request spans and gen-ai server histograms for one served model.

    Args:
        model: ``gen_ai.request.model``.
        operation: ``gen_ai.operation.name`` (``text_completion``, ``chat``).
        tracer_provider: where spans go (the global provider when ``None``).
        meter_provider: where histograms go (the global provider when ``None``).
        attributes: extra attributes for every request span (device identity).
        accounting: per-request device time and energy fed by the engine's steps; each
            request span ends with its totals (``accel.request.device_time_ns``,
            ``accel.request.energy``).
    """

    def __init__(
        self,
        *,
        model: str,
        operation: str = "text_completion",
        tracer_provider: ApiTracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        attributes: Mapping[str, Any] | None = None,
        accounting: RequestAccounting | None = None,
    ):
        self.accounting = accounting
        self.tracer = get_tracer(tracer_provider)
        meter = get_meter(INSTRUMENTATION_NAME, "0.1.0", meter_provider=meter_provider)
        self.ttft = meter.create_histogram(
            METRIC_GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
            unit="s",
            description="Time to generate first token for successful responses.",
            explicit_bucket_boundaries_advisory=TTFT_BUCKETS,
        )
        self.tpot = meter.create_histogram(
            METRIC_GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
            unit="s",
            description="Time per output token generated after the first token for successful responses.",
            explicit_bucket_boundaries_advisory=TPOT_BUCKETS,
        )
        self.duration = meter.create_histogram(
            METRIC_GEN_AI_SERVER_REQUEST_DURATION,
            unit="s",
            description="Generative AI server request duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.model = model
        self.operation = operation
        self._metric_attrs = {GEN_AI_REQUEST_MODEL: model, GEN_AI_OPERATION_NAME: operation}
        self._span_attrs = {**self._metric_attrs, **(attributes or {})}

    def _record(self, histogram: Any, value: float, ctx: Context, error: Any = None) -> None:
        try:
            attrs = self._metric_attrs
            if error is not None:
                attrs = {
                    **attrs,
                    ERROR_TYPE: error if isinstance(error, str) else type(error).__qualname__,
                }
            histogram.record(value, attributes=attrs, context=ctx)
        except Exception as exc:
            log_once("inference.record", "%s: %s", type(exc).__name__, exc)

    def start_request(
        self,
        request_id: str,
        *,
        input_tokens: int | None = None,
        start_time: int | None = None,
        context: Context | None = None,
        carrier: Mapping[str, str] | None = None,
    ) -> RequestTrace:
        """Open a request span at its arrival (``start_time``, now by default).

        Args:
            request_id: ``accel.request.id``.
            input_tokens: prompt tokens.
            start_time: arrival, ns since the epoch.
            context: explicit parent context.
            carrier: W3C headers from another engine (used when ``context`` is ``None``).

        Returns:
            The request's :class:`RequestTrace`.
        """
        start = _now(start_time)
        if context is None and carrier is not None:
            context = extract_context(carrier)
        attrs = {ACCEL_REQUEST_ID: request_id, **self._span_attrs}
        if input_tokens is not None:
            attrs[GEN_AI_USAGE_INPUT_TOKENS] = int(input_tokens)
        try:
            span = self.tracer.start_span(
                SPAN_ACCEL_REQUEST,
                context=context,
                kind=SpanKind.SERVER,
                attributes=attrs,
                start_time=start,
            )
        except Exception as exc:
            log_once("inference.start", "%s: %s", type(exc).__name__, exc)
            span = INVALID_SPAN
        return RequestTrace(self, span, start, input_tokens, request_id)


def engine_step(
    step: int,
    requests: Sequence[tuple[str, int, int]],
    *,
    start_time: int,
    end_time: int,
    device_time_ns: int | None = None,
    chips: int | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: ApiTracerProvider | None = None,
    context: Context | None = None,
) -> None:
    """Record one engine step: ``requests`` as ``(request id, prompt tokens, generated
    tokens)`` computed in this step. Never raises (a failure is logged once).

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    >>> exp = InMemorySpanExporter(); tp = TracerProvider()
    >>> tp.add_span_processor(SimpleSpanProcessor(exp))
    >>> engine_step(7, [("r1", 512, 0), ("r2", 0, 1)], start_time=10, end_time=90,
    ...             device_time_ns=320, chips=4, tracer_provider=tp)
    >>> span = exp.get_finished_spans()[0]
    >>> span.name, span.attributes["accel.engine.step.request_ids"]
    ('accel.engine.step', ('r1', 'r2'))
    >>> span.attributes["accel.engine.step.prefill_tokens"], span.attributes["accel.engine.step.device_time_ns"]
    ((512, 0), 320)
    """
    try:
        attrs: dict[str, Any] = dict(attributes or {})
        attrs[ACCEL_ENGINE_STEP_INDEX] = int(step)
        attrs[ACCEL_ENGINE_STEP_REQUEST_IDS] = [str(r[0]) for r in requests]
        attrs[ACCEL_ENGINE_STEP_PREFILL_TOKENS] = [int(r[1]) for r in requests]
        attrs[ACCEL_ENGINE_STEP_DECODE_TOKENS] = [int(r[2]) for r in requests]
        if device_time_ns is not None:
            attrs[ACCEL_ENGINE_STEP_DEVICE_TIME_NS] = int(device_time_ns)
        if chips is not None:
            attrs[ACCEL_ENGINE_STEP_CHIPS] = int(chips)
        span = get_tracer(tracer_provider).start_span(
            SPAN_ACCEL_ENGINE_STEP, context=context, attributes=attrs, start_time=start_time
        )
        span.end(end_time=end_time)
    except Exception as exc:
        log_once("inference.engine_step", "%s: %s", type(exc).__name__, exc)


class RequestAccounting:
    """Per-request device time and energy under continuous batching, online.

    Feed every engine step with :meth:`step`; each request's parts accumulate until
    :meth:`pop` (which :meth:`RequestTrace.finish` calls when the instrumentation has this
    accounting). The split is :func:`token_shares` with ``costs`` when given, else with the
    least-squares costs of the steps seen so far (equal token weights until three steps with
    both kinds of token make them identifiable). Thread-safe; never raises (a bad step is
    logged once and dropped, counted in ``dropped_steps``); at most ``max_requests`` open
    requests are held (the oldest dropped, counted in ``dropped_requests``).

    >>> acc = RequestAccounting(costs={"prefill_ns_per_token": 1.0, "decode_ns_per_token": 1.0,
    ...                                "step_ns": 0.0})
    >>> acc.step([("a", 6, 0), ("b", 0, 2)], device_time_ns=400, energy_j=8.0)
    >>> acc.pop("a"), acc.pop("b"), acc.pop("c")
    ((300.0, 6.0), (100.0, 2.0), None)
    """

    def __init__(
        self, *, costs: Mapping[str, float] | None = None, max_requests: int = 100_000
    ) -> None:
        self._fixed = dict(costs) if costs is not None else None
        self._max = max(1, int(max_requests))
        self._lock = threading.Lock()
        self._open: dict[str, list[float | None]] = {}
        # running sums of the normal equations of device_ns ~ c_p·P + c_d·D + c_s
        self._xtx = [[0.0] * 3 for _ in range(3)]
        self._xty = [0.0] * 3
        self._steps = 0
        self.dropped_steps = 0
        self.dropped_requests = 0

    def costs(self) -> dict[str, float]:
        """The costs the next step is split with."""
        if self._fixed is not None:
            return dict(self._fixed)
        equal = {"prefill_ns_per_token": 1.0, "decode_ns_per_token": 1.0, "step_ns": 0.0}
        if self._steps < 3:
            return equal
        try:
            import numpy as np

            coef = np.linalg.solve(np.asarray(self._xtx), np.asarray(self._xty))
        except Exception:  # singular: one kind of token only so far
            return equal
        if coef[0] <= 0 or coef[1] <= 0 or coef[2] < 0:
            return equal
        return {
            "prefill_ns_per_token": float(coef[0]),
            "decode_ns_per_token": float(coef[1]),
            "step_ns": float(coef[2]),
        }

    def step(
        self,
        requests: Sequence[tuple[str, int, int]],
        *,
        device_time_ns: int,
        energy_j: float | None = None,
    ) -> None:
        """One engine step: ``(request id, prompt tokens, generated tokens)`` per request it
        served, its device time (summed over its chips) and, if measured, its energy."""
        try:
            ids = [str(r[0]) for r in requests]
            pre = [int(r[1]) for r in requests]
            dec = [int(r[2]) for r in requests]
            dev = float(device_time_ns)
            with self._lock:
                shares = token_shares(pre, dec, self.costs())
                for rid, sh in zip(ids, shares):
                    acc = self._open.get(rid)
                    if acc is None:
                        if len(self._open) >= self._max:
                            self._open.pop(next(iter(self._open)))
                            self.dropped_requests += 1
                        acc = self._open[rid] = [0.0, None]
                    acc[0] = float(acc[0] or 0.0) + sh * dev
                    if energy_j is not None:
                        acc[1] = float(acc[1] or 0.0) + sh * float(energy_j)
                x = (float(sum(pre)), float(sum(dec)), 1.0)
                for i in range(3):
                    self._xty[i] += x[i] * dev
                    for j in range(3):
                        self._xtx[i][j] += x[i] * x[j]
                self._steps += 1
        except Exception as exc:
            self.dropped_steps += 1
            log_once("inference.accounting", "%s: %s", type(exc).__name__, exc)

    def pop(self, request_id: str) -> tuple[float, float | None] | None:
        """The request's device time (ns) and energy (J, None when no step measured it),
        removed; None for a request no step served."""
        with self._lock:
            got = self._open.pop(str(request_id), None)
        if got is None:
            return None
        return float(got[0] or 0.0), (None if got[1] is None else float(got[1]))
