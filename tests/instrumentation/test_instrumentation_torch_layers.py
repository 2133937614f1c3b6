"""TorchLayerInstrumentor on a real small PyTorch model, with an in-memory exporter.

Ground truth for FLOPs is ``torch.utils.flop_counter.FlopCounterMode`` (PyTorch's own
per-module counter of matrix products), plus layer norm's element-wise work; bytes are
recomputed here from the tensors test-side hooks saw.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from otel_ext.instrumentation.torch import TorchLayerInstrumentor  # noqa: E402
from otel_ext.instrumentation.torch._flops import module_estimator, sdpa_estimate  # noqa: E402

D, H, V, B, L = 16, 2, 32, 2, 5


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.reshape(b, n, H, d // H).transpose(1, 2) for t in self.qkv(x).split(d, -1))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.attn = Attn()
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln(x))
        return x + self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.mha = nn.MultiheadAttention(D, H, batch_first=True)
        self.conv = nn.Conv1d(D, D, 3, padding=1)
        self.head = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        x = x + self.mha(x, x, x, need_weights=False)[0]
        x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x)


def _model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM().eval()


IDS = torch.arange(B * L).reshape(B, L) % V


@pytest.fixture
def traced() -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = TorchLayerInstrumentor()
    yield inst, provider, exporter
    inst.uninstrument()
    provider.shutdown()


def _sdpa_truth(b: int, h: int, lq: int, lk: int, d: int) -> int:
    """FLOPs of attention by its definition (PyTorch's counter skips the fused CPU kernel)."""
    q, k, v = torch.randn(b, h, lq, d), torch.randn(b, h, lk, d), torch.randn(b, h, lk, d)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ k.transpose(-2, -1) / d**0.5, dim=-1) @ v
    return int(counter.get_total_flops())


def _ground_truth(model: nn.Module) -> tuple[dict[str, float], dict[str, float]]:
    """Inclusive FLOPs and bytes per qualified name, computed independently of the instrumentor."""
    with FlopCounterMode(display=False) as counter:
        model(IDS)
    root = type(model).__name__
    flops: dict[str, float] = defaultdict(float)
    for key, counts in counter.get_flop_counts().items():
        if key == "Global":
            continue
        name = key.removeprefix(root).removeprefix(".") or root
        flops[name] = float(sum(counts.values()))
    flops[root] = float(sum(counter.get_flop_counts()["Global"].values()))
    # Own bytes of the estimable leaves, from the tensors they saw.
    own_bytes: dict[str, float] = {}
    seen: list[tuple[str, nn.Module, Any, Any]] = []
    handles = []
    for qual, m in model.named_modules():
        if isinstance(
            m, nn.Linear | nn.Conv1d | nn.LayerNorm | nn.Embedding | nn.MultiheadAttention
        ):
            handles.append(
                m.register_forward_hook(lambda mod, a, o, q=qual: seen.append((q, mod, a, o)))
            )
    sdpa_calls: list[tuple[torch.Tensor, ...]] = []
    for qual, m in model.named_modules():
        if isinstance(m, Attn):
            handles.append(
                m.register_forward_hook(lambda mod, a, o, q=qual: sdpa_calls.append((q,)))
            )
    model(IDS)
    for h in handles:
        h.remove()

    def nbytes(*ts: torch.Tensor) -> float:
        return float(sum(t.numel() * t.element_size() for t in ts))

    for qual, m, args, out in seen:
        params = float(sum(p.numel() * 4 for p in m.parameters()))
        if isinstance(m, nn.Embedding):
            own_bytes[qual] = 2 * nbytes(out) + nbytes(args[0])
        elif isinstance(m, nn.MultiheadAttention):
            q = args[0]
            own_bytes[qual] = params + 3 * nbytes(q) + nbytes(out[0])
        else:
            own_bytes[qual] = params + nbytes(args[0]) + nbytes(out)
        if isinstance(m, nn.LayerNorm):
            for name in {*flops, qual}:
                if name == root or qual == name or qual.startswith(name + "."):
                    flops[name] += 5.0 * args[0].numel()
    # sdpa inside Attn and MultiheadAttention: q, k, v and the output, each (B, H, L, D/H).
    attn_flops = _sdpa_truth(B, H, L, L, D // H)
    for (qual,) in sdpa_calls:
        own_bytes[qual] = own_bytes.get(qual, 0.0) + 4 * B * L * D * 4
    for qual in [
        q for q, m in model.named_modules() if isinstance(m, Attn | nn.MultiheadAttention)
    ]:
        parts = qual.split(".")
        for name in {root} | {".".join(parts[:i]) for i in range(1, len(parts) + 1)}:
            flops[name] = flops.get(name, 0.0) + attn_flops
    inclusive: dict[str, float] = defaultdict(float)
    for qual, b in own_bytes.items():
        inclusive[root] += b
        parts = qual.split(".")
        for i in range(1, len(parts) + 1):
            inclusive[".".join(parts[:i])] += b
    return dict(flops), dict(inclusive)


def test_full_span_tree_and_attributes(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    expected_out = model(IDS)
    flops, nbytes = _ground_truth(model)
    inst.instrument(tracer_provider=provider, model=model, host_id="host0", rank=0)
    out = model(IDS)
    assert torch.equal(out, expected_out)
    spans = exporter.get_finished_spans()
    by_name = {s.attributes["accel.layer.name"]: s for s in spans}
    assert len(by_name) == len(spans)
    modules = dict(model.named_modules())
    # Every module that runs gets a span (a ModuleList is never called; MultiheadAttention
    # uses its out_proj weights without calling it).
    called = {q: m for q, m in modules.items() if q not in ("blocks", "mha.out_proj")}
    assert set(by_name) == {q or "TinyLM" for q in called}
    for qual, m in called.items():
        name = qual or "TinyLM"
        span = by_name[name]
        last = qual.rsplit(".", 1)[-1]
        parent_qual = qual.rsplit(".", 1)[0] if "." in qual else ""
        siblings = [n for n, _ in modules[parent_qual].named_children()] if qual else []
        expected = {
            "accel.layer.name": name,
            "accel.layer.index": int(last)
            if last.isdigit()
            else (siblings.index(last) if qual else 0),
            "accel.layer.type": type(m).__name__,
            "accel.layer.depth": qual.count(".") + 1 if qual else 0,
            "accel.layer.pass": "forward",
            "accel.layer.parameters": sum(p.numel() for p in m.parameters()),
            "accel.host.id": "host0",
            "accel.device.id": "host0/cpu",
            "accel.rank": 0,
        }
        if name in nbytes:
            expected["accel.layer.flops"] = pytest.approx(flops.get(name, 0.0))
            expected["accel.layer.bytes"] = pytest.approx(nbytes[name])
        assert dict(span.attributes) == expected, name
        # Nesting follows the module tree.
        if qual:
            while parent_qual and parent_qual not in called:  # nearest ancestor that ran
                parent_qual = parent_qual.rsplit(".", 1)[0] if "." in parent_qual else ""
            parent = by_name[parent_qual or "TinyLM"]
            assert span.parent.span_id == parent.context.span_id
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
        else:
            assert span.parent is None
    assert (
        flops["TinyLM"] > 0
        and by_name["blocks.0.attn"].attributes["accel.layer.flops"]
        > by_name["blocks.0.attn.qkv"].attributes["accel.layer.flops"]
        + by_name["blocks.0.attn.proj"].attributes["accel.layer.flops"]
    )


def test_depth_and_name_filters_keep_block_totals(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    flops, _ = _ground_truth(model)
    inst.instrument(tracer_provider=provider, model=model, max_depth=2, exclude=["mha", "conv"])
    model(IDS)
    names = sorted(s.attributes["accel.layer.name"] for s in exporter.get_finished_spans())
    assert names == sorted(["TinyLM", "emb", "head", "blocks.0", "blocks.1"])
    spans = {s.attributes["accel.layer.name"]: s for s in exporter.get_finished_spans()}
    # A block traced without its children still carries their estimated work.
    assert spans["blocks.0"].attributes["accel.layer.flops"] == pytest.approx(flops["blocks.0"])
    inst.uninstrument()
    exporter.clear()
    inst.instrument(tracer_provider=provider, model=model, include=["blocks.*.attn"])
    model(IDS)
    assert sorted(s.attributes["accel.layer.name"] for s in exporter.get_finished_spans()) == [
        "blocks.0.attn",
        "blocks.1.attn",
    ]


def test_record_shapes(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    inst.instrument(
        tracer_provider=provider, model=model, record_shapes=True, include=["head", "emb"]
    )
    model(IDS)
    spans = {s.attributes["accel.layer.name"]: s.attributes for s in exporter.get_finished_spans()}
    assert spans["emb"]["accel.layer.input_shapes"] == (f"[{B}, {L}]",)
    assert spans["emb"]["accel.layer.input_dtypes"] == ("int64",)
    assert spans["head"]["accel.layer.output_shapes"] == (f"[{B}, {L}, {V}]",)
    assert spans["head"]["accel.layer.output_dtypes"] == ("float32",)


def _hook_total(model: nn.Module) -> int:
    from torch.nn.modules import module as mod

    per_module = sum(
        len(m._forward_hooks)
        + len(m._forward_pre_hooks)
        + len(m._backward_hooks)
        + len(m._backward_pre_hooks)
        for m in model.modules()
    )
    return per_module + len(mod._global_forward_hooks) + len(mod._global_forward_pre_hooks)


def test_instrument_uninstrument_instrument_no_duplicates_no_leftovers(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    sdpa = F.scaled_dot_product_attention
    n_modules = len(list(model.modules())) - 2  # "blocks" and "mha.out_proj" never run
    inst.instrument(tracer_provider=provider, model=model, backward=True)
    inst.instrument(tracer_provider=provider, model=model)  # idempotent: ignored
    assert _hook_total(model) > 0 and F.scaled_dot_product_attention is not sdpa
    inst.uninstrument()
    inst.uninstrument()
    assert _hook_total(model) == 0 and inst.hook_count == 0
    assert F.scaled_dot_product_attention is sdpa
    model(IDS)
    assert exporter.get_finished_spans() == ()
    inst.instrument(tracer_provider=provider, model=model)
    model(IDS)
    assert len(exporter.get_finished_spans()) == n_modules
    inst.uninstrument()
    assert _hook_total(model) == 0


def test_global_hooks_trace_any_model(traced: Any) -> None:
    inst, provider, exporter = traced
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    inst.instrument(tracer_provider=provider, host_id="h")
    model(torch.zeros(3, 4))
    inst.uninstrument()
    spans = exporter.get_finished_spans()
    assert [s.attributes["accel.layer.name"] for s in spans] == ["0", "1", "2", "Sequential"]
    assert spans[0].attributes["accel.layer.flops"] == 2 * 3 * 4 * 8
    assert _hook_total(model) == 0


def test_deferred_mode_gives_the_same_spans(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    inst.instrument(tracer_provider=provider, model=model, host_id="h")
    model(IDS)
    inst.uninstrument()
    eager = exporter.get_finished_spans()
    exporter.clear()
    inst.instrument(tracer_provider=provider, model=model, host_id="h", deferred=True)
    out = model(IDS)
    assert inst.flush()
    inst.uninstrument()
    deferred = exporter.get_finished_spans()
    assert torch.equal(out, model(IDS))

    def shape(spans: Any) -> dict[str, tuple[Any, ...]]:
        ids = {s.context.span_id: s.attributes["accel.layer.name"] for s in spans}
        return {
            s.attributes["accel.layer.name"]: (
                dict(s.attributes),
                ids.get(s.parent.span_id) if s.parent else None,
            )
            for s in spans
        }

    assert shape(deferred) == shape(eager)
    assert len({s.context.trace_id for s in deferred}) == 1


def test_backward_spans(traced: Any) -> None:
    inst, provider, exporter = traced
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    inst.instrument(tracer_provider=provider, model=model, backward=True, host_id="h")
    x = torch.randn(5, 4, requires_grad=True)
    model(x).sum().backward()
    inst.uninstrument()
    bwd = [
        s for s in exporter.get_finished_spans() if s.attributes["accel.layer.pass"] == "backward"
    ]
    names = {s.attributes["accel.layer.name"]: s for s in bwd}
    assert set(names) == {"Sequential", "0", "1", "2"}
    root = names["Sequential"]
    for child in ("0", "1", "2"):
        assert names[child].parent.span_id == root.context.span_id
    assert names["0"].attributes["accel.layer.flops"] == 2 * (2.0 * 5 * 4 * 8)
    assert x.grad is not None


class _RaisingExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        raise RuntimeError("collector down")

    def shutdown(self) -> None:
        pass


class _RaisingProcessor(SimpleSpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor broken")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor broken")


@pytest.mark.parametrize("deferred", [False, True])
def test_raising_exporter_and_processor_do_not_hurt_the_model(deferred: bool) -> None:
    model = _model()
    # backward=True registers full backward hooks, and PyTorch's own backward hooks change
    # the forward result by ~1e-7 on some CPUs (a different kernel path): the reference is
    # an uninstrumented run with the same hooks, so exact equality is the right check.
    handles = []
    if not deferred:
        for m in model.modules():
            handles.append(m.register_full_backward_pre_hook(lambda *_: None))
            handles.append(m.register_full_backward_hook(lambda *_: None))
    expected = model(IDS)
    for h in handles:
        h.remove()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_RaisingExporter()))
    provider.add_span_processor(_RaisingProcessor(_RaisingExporter()))
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model, deferred=deferred, backward=not deferred)
    try:
        for _ in range(2):
            assert torch.equal(model(IDS), expected)
        inst.flush()
    finally:
        inst.uninstrument()


class _RaisingOnEnd(SimpleSpanProcessor):
    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor broken in on_end")


def test_processor_raising_in_on_end_leaves_no_layer_span_current() -> None:
    model = _model()
    provider = TracerProvider()
    provider.add_span_processor(_RaisingOnEnd(InMemorySpanExporter()))
    tracer = TracerProvider().get_tracer("test")  # the user's span, from a sound provider
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model)
    try:
        with tracer.start_as_current_span("outer") as outer:
            model(IDS)
            # every layer's context was detached although every span end raised
            assert trace.get_current_span() is outer
        assert trace.get_current_span() is trace.INVALID_SPAN
    finally:
        inst.uninstrument()


class _FailStartOf(SimpleSpanProcessor):
    """Raises in on_start for one layer name: that layer's span start fails."""

    def __init__(self, exporter: Any, name: str):
        super().__init__(exporter)
        self.name = name

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.attributes.get("accel.layer.name") == self.name:
            raise RuntimeError("start refused")


class _ThreeSteps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.bad = nn.ReLU()
        self.c = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.bad(self.a(x)))


@pytest.mark.parametrize("patch_forward", [True, False])
def test_failed_start_does_not_end_the_ancestors_early(patch_forward: bool) -> None:
    model = nn.Sequential(_ThreeSteps())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(_FailStartOf(InMemorySpanExporter(), "0.bad"))
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model, patch_forward=patch_forward)
    try:
        model(torch.ones(2, 4))
    finally:
        inst.uninstrument()
    spans = {s.attributes["accel.layer.name"]: s for s in exporter.get_finished_spans()}
    # "0.bad" was started (and ended) by the SDK although a processor refused it; what
    # matters is that its parent and the root stayed open and current for "0.c".
    parent, root, after = spans["0"], spans["Sequential"], spans["0.c"]
    assert after.parent.span_id == parent.context.span_id
    assert parent.parent.span_id == root.context.span_id
    assert parent.end_time >= after.end_time and root.end_time >= parent.end_time


@pytest.mark.parametrize("deferred", [False, True])
def test_compiled_model_has_no_graph_break_and_no_spans_inside(deferred: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    x = torch.randn(3, 8)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model, deferred=deferred)
    try:
        torch._dynamo.reset()
        # fullgraph=True raises on any graph break (a ContextVar.get used to cause 8)
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        out = compiled(x)
        inst.flush()
        assert exporter.get_finished_spans() == ()  # compiled regions are skipped
        eager = model(x)  # the same model outside compile is still traced
        inst.flush()
        assert len(exporter.get_finished_spans()) == 4
    finally:
        inst.uninstrument()
        torch._dynamo.reset()
    assert torch.allclose(out, eager, rtol=1e-5, atol=1e-6)


def test_down_collector_does_not_hurt_the_model() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    model = _model()
    expected = model(IDS)
    provider = TracerProvider()
    # Nothing listens on port 9 (discard): every export fails.
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1))
    )
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model)
    try:
        assert torch.equal(model(IDS), expected)
    finally:
        inst.uninstrument()
        provider.shutdown()


def test_entry_points_load() -> None:
    from importlib.metadata import entry_points

    from otel_ext.instrumentation.torch import TorchDistributedInstrumentor

    eps = {ep.name: ep for ep in entry_points(group="opentelemetry_instrumentor")}
    assert eps["otel_ext_torch_layers"].load() is TorchLayerInstrumentor
    assert eps["otel_ext_torch_distributed"].load() is TorchDistributedInstrumentor
    assert list(TorchLayerInstrumentor().instrumentation_dependencies()) == ["torch >= 2.0"]


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    tokens=st.integers(1, 6),
    fin=st.integers(1, 24),
    fout=st.integers(1, 24),
)
def test_linear_flops_match_torch_counter(batch: int, tokens: int, fin: int, fout: int) -> None:
    lin = nn.Linear(fin, fout)
    x = torch.randn(batch, tokens, fin)
    with FlopCounterMode(display=False) as counter:
        out = lin(x)
    est = module_estimator(lin)
    assert est is not None
    flops, nbytes = est(lin, (x,), {}, out)
    assert flops == counter.get_total_flops()
    assert nbytes == 4 * (x.numel() + fin * fout + fout + out.numel())


@settings(max_examples=20, deadline=None)
@given(
    cin=st.integers(1, 6),
    cout=st.integers(1, 6),
    k=st.integers(1, 3),
    size=st.integers(3, 9),
    two_d=st.booleans(),
    groups=st.sampled_from([1, 2]),
)
def test_conv_flops_match_torch_counter(
    cin: int, cout: int, k: int, size: int, two_d: bool, groups: int
) -> None:
    cin, cout = cin * groups, cout * groups
    conv = (nn.Conv2d if two_d else nn.Conv1d)(cin, cout, k, groups=groups)
    x = torch.randn(2, cin, *((size, size) if two_d else (size,)))
    with FlopCounterMode(display=False) as counter:
        out = conv(x)
    est = module_estimator(conv)
    assert est is not None
    assert est(conv, (x,), {}, out)[0] == counter.get_total_flops()


@settings(max_examples=20, deadline=None)
@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    lq=st.integers(1, 7),
    lk=st.integers(1, 7),
    d=st.integers(1, 8),
)
def test_attention_flops_match_torch_counter(b: int, h: int, lq: int, lk: int, d: int) -> None:
    q, k, v = torch.randn(b, h, lq, d), torch.randn(b, h, lk, d), torch.randn(b, h, lk, d)
    assert sdpa_estimate(q, k, v)[0] == _sdpa_truth(b, h, lq, lk, d)
    embed = 4 * h
    mha = nn.MultiheadAttention(embed, h, batch_first=True)
    x, kv = torch.randn(b, lq, embed), torch.randn(b, lk, embed)
    with FlopCounterMode(display=False) as counter:
        out = mha(x, kv, kv, need_weights=False)
    est = module_estimator(mha)
    assert est is not None
    projections = counter.get_total_flops()  # the fused attention itself is not counted on CPU
    assert est(mha, (x, kv, kv), {}, out)[0] == projections + _sdpa_truth(b, h, lq, lk, embed // h)


# -- deferred mode: hot-path variants, estimates, lifecycle ------------------------------


def _tree(spans: Any) -> dict[str, tuple[Any, ...]]:
    """Layer name -> (attributes, parent layer name): what must not depend on the mode."""
    ids = {s.context.span_id: s.attributes["accel.layer.name"] for s in spans}
    return {
        s.attributes["accel.layer.name"]: (
            dict(s.attributes),
            ids.get(s.parent.span_id) if s.parent else None,
        )
        for s in spans
    }


def _run_traced(
    provider: Any, exporter: Any, net: nn.Module, x: Any, *, backward: bool = False, **opts: Any
) -> Any:
    """Instrument with ``opts``, run ``net`` once (and its backward), return the spans."""
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, host_id="h", backward=backward, **opts)
    try:
        out = net(x)
        if backward:
            out.float().sum().backward()
        assert inst.flush()
    finally:
        inst.uninstrument()
    spans = exporter.get_finished_spans()
    exporter.clear()
    return spans


@pytest.mark.parametrize(
    "attach",
    [{"patch_forward": True}, {"patch_forward": False}, {"global_hooks": True}],
    ids=["forward-wrapper", "module-hooks", "global-hooks"],
)
def test_deferred_equals_eager_for_every_attachment(traced: Any, attach: dict[str, Any]) -> None:
    _, provider, exporter = traced
    model = _model()
    opts = {} if attach.get("global_hooks") else {"model": model, **attach}
    reference = _tree(_run_traced(provider, exporter, model, IDS, model=model))
    eager = _tree(_run_traced(provider, exporter, model, IDS, **opts))
    deferred_spans = _run_traced(provider, exporter, model, IDS, deferred=True, **opts)
    assert _tree(deferred_spans) == eager == reference
    assert len({s.context.trace_id for s in deferred_spans}) == 1


def test_deferred_with_shapes_filters_and_backward_equals_eager(traced: Any) -> None:
    _, provider, exporter = traced
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Tanh(), nn.Linear(8, 2)))
    x = torch.randn(5, 4, requires_grad=True)
    opts = {"model": model, "record_shapes": True, "exclude": ["1.1"], "backward": True}

    def split(spans: Any) -> tuple[Any, Any]:
        fwd = [s for s in spans if s.attributes["accel.layer.pass"] == "forward"]
        bwd = [s for s in spans if s.attributes["accel.layer.pass"] == "backward"]
        return _tree(fwd), {s.attributes["accel.layer.name"]: dict(s.attributes) for s in bwd}

    eager = split(_run_traced(provider, exporter, model, x, **opts))
    deferred = split(_run_traced(provider, exporter, model, x, deferred=True, **opts))
    assert deferred == eager
    # "1.1" is excluded, yet its FLOPs count in "1" and the root (inclusive totals).
    fwd = eager[0]
    assert fwd["1"][0]["accel.layer.flops"] == 2 * 5 * 8 * 2
    assert fwd["Sequential"][0]["accel.layer.flops"] == 2 * 5 * 4 * 8 + 2 * 5 * 8 * 2
    assert (
        eager[1]["Sequential"]["accel.layer.flops"] == 2 * fwd["Sequential"][0]["accel.layer.flops"]
    )


class _ThreadOfStart(SimpleSpanProcessor):
    def __init__(self) -> None:
        super().__init__(InMemorySpanExporter())
        self.threads: set[int] = set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        import threading

        self.threads.add(threading.get_ident())


def test_deferred_spans_are_made_off_the_workload_thread() -> None:
    import threading

    model = _model()
    provider = TracerProvider()
    spy = _ThreadOfStart()
    provider.add_span_processor(spy)
    inst = TorchLayerInstrumentor()
    inst.instrument(tracer_provider=provider, model=model, deferred=True)
    try:
        model(IDS)
        assert inst.flush()
    finally:
        inst.uninstrument()
    assert spy.threads and threading.get_ident() not in spy.threads


def test_forward_wrappers_are_removed_and_foreign_forwards_kept(traced: Any) -> None:
    inst, provider, exporter = traced
    model = _model()
    foreign_calls: list[int] = []
    original_head_forward = model.head.forward

    def foreign(x: torch.Tensor) -> torch.Tensor:  # e.g. another library's patch
        foreign_calls.append(1)
        return original_head_forward(x)

    model.head.forward = foreign  # type: ignore[method-assign]
    expected = model(IDS)
    inst.instrument(tracer_provider=provider, model=[model, model.blocks[0]], deferred=True)
    assert "forward" in vars(model.blocks[0].ln) and "forward" in vars(model.emb)
    assert vars(model.head)["forward"] is foreign  # left alone: hooked instead
    assert torch.equal(model(IDS), expected)
    assert inst.flush()
    inst.uninstrument()
    spans = exporter.get_finished_spans()
    names = [s.attributes["accel.layer.name"] for s in spans]
    assert len(names) == len(set(names))  # a module shared by both models: one span
    assert "head" in names and len(foreign_calls) == 2
    assert vars(model.head)["forward"] is foreign
    assert all("forward" not in vars(m) for n, m in model.named_modules() if m is not model.head)
    assert _hook_total(model) == 0 and inst.hook_count == 0


def test_deepcopy_of_an_instrumented_model_runs_its_own_weights(traced: Any) -> None:
    import copy

    inst, provider, _ = traced
    model = _model()
    inst.instrument(tracer_provider=provider, model=model, deferred=True)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone.head.weight.add_(1.0)
    assert not torch.equal(clone(IDS), model(IDS))
    inst.uninstrument()
    assert torch.equal(clone(IDS), copy.deepcopy(clone)(IDS))


class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() < 0:
            raise ValueError("negative")
        return x


@pytest.mark.parametrize("deferred", [False, True])
def test_a_raising_layer_closes_its_spans_and_the_next_pass_nests(
    traced: Any, deferred: bool
) -> None:
    inst, provider, exporter = traced
    model = nn.Sequential(nn.Identity(), nn.Sequential(_Boom()))
    inst.instrument(tracer_provider=provider, model=model, deferred=deferred)
    with pytest.raises(ValueError, match="negative"):
        model(-torch.ones(2))
    model(torch.ones(2))
    assert inst.flush()
    spans = exporter.get_finished_spans()
    assert len(spans) == 2 * 4  # Sequential, 0, 1, 1.0 for both passes: all ended
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 2 and roots[0].context.trace_id != roots[1].context.trace_id
    for root in roots:  # each pass is its own, complete tree
        tree = {
            s.attributes["accel.layer.name"]: s
            for s in spans
            if s.context.trace_id == root.context.trace_id
        }
        assert set(tree) == {"Sequential", "0", "1", "1.0"}
        assert tree["1.0"].parent.span_id == tree["1"].context.span_id
        assert tree["1"].parent.span_id == tree["Sequential"].context.span_id


def test_deferred_ring_overflow_drops_and_counts(traced: Any) -> None:
    inst, provider, exporter = traced
    model = nn.Sequential(*[nn.Identity() for _ in range(40)])
    inst.instrument(tracer_provider=provider, model=model, deferred=True, deferred_capacity=16)
    x = torch.ones(1)
    assert torch.equal(model(x), x)
    assert inst.flush()
    recorder = inst._state.recorder
    assert recorder.dropped == 41 - 16
    assert len(exporter.get_finished_spans()) == 16


# A random call tree, as nested lists: [estimate or None, child, child, ...].
_trees = st.recursive(
    st.tuples(st.one_of(st.none(), st.integers(0, 9))).map(list),
    lambda kids: st.tuples(st.one_of(st.none(), st.integers(0, 9)), st.lists(kids, max_size=4)).map(
        lambda t: [t[0], *t[1]]
    ),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None)
@given(tree=_trees, use_wrap=st.booleans())
def test_recorder_nesting_and_inclusive_estimates_match_the_tree(
    tree: list[Any], use_wrap: bool
) -> None:
    from otel_ext.instrumentation.deferred import DeferredSpanRecorder

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rec = DeferredSpanRecorder(tracer_provider=provider, capacity=64)
    expected: dict[str, tuple[float | None, str | None]] = {}

    def truth(node: list[Any], path: str, parent: str | None) -> float | None:
        total = node[0]
        for i, child in enumerate(node[1:]):
            sub = truth(child, f"{path}.{i}", path)
            if sub is not None:
                total = (total or 0) + sub
        expected[path] = (total, parent)
        return total

    truth(tree, "r", None)

    def run(node: list[Any], path: str) -> None:
        def body() -> None:
            if node[0] is not None:
                rec.add_estimate(float(node[0]), 2.0 * node[0])
            for i, child in enumerate(node[1:]):
                run(child, f"{path}.{i}")

        lid = rec.register("accel.layer", {"accel.layer.name": path})
        if use_wrap:
            rec.wrap(body, lid)()
        else:
            rec.begin(lid)
            body()
            rec.end()

    run(tree, "r")
    assert rec.flush()
    rec.shutdown()
    spans = exporter.get_finished_spans()
    got = {}
    by_id = {s.context.span_id: s.attributes["accel.layer.name"] for s in spans}
    for s in spans:
        flops = s.attributes.get("accel.layer.flops")
        if flops is not None:
            assert s.attributes["accel.layer.bytes"] == 2 * flops
        got[s.attributes["accel.layer.name"]] = (
            flops,
            by_id[s.parent.span_id] if s.parent else None,
        )
    assert got == expected
