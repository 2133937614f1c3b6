"""Roofline per layer: where each layer sits between the memory and the compute roof.

Layer spans carry FLOP and byte estimates (``accel.layer.flops``, ``accel.layer.bytes``, the
table's ``flops`` and ``bytes_accessed`` columns). Per layer name we sum FLOP, bytes and time
over all its spans; arithmetic intensity = FLOP / byte; achieved FLOP/s = FLOP / time; the
roof at that intensity is ``min(peak FLOP/s, memory bandwidth × intensity)`` from the device's
peak specification (``semantic_conventions/model/devices/specs.yaml``); ``pct_of_roof`` says
how close the layer comes. A layer whose intensity is below the ridge point
(peak FLOP/s ÷ bandwidth) is memory-bound, above it compute-bound.

>>> from otel_ext.analysis.table import Category as C, EventTable
>>> t = EventTable.from_rows([dict(start_ns=0, end_ns=1_000_000, category=C.LAYER,
...     name="mlp", flops=5e8, bytes_accessed=1e6, rank=0)])
>>> r = roofline(t, peak_flops=1e12, memory_bandwidth=1e11)[0]
>>> r["intensity"], r["bound"], r["achieved_flops"], r["pct_of_roof"]
(500.0, 'compute', 500000000000.0, 50.0)
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from otel_ext.analysis.table import Category, EventTable

__all__ = ["RooflineRow", "peak_of", "roofline"]


def peak_of(device_model: str, *, dtype: str = "bf16") -> tuple[float, float] | None:
    """``(peak FLOP/s, memory bandwidth)`` of a device model from the registry, or None.

    >>> peak_of("H100-SXM5-80GB")
    (989000000000000.0, 3350000000000.0)
    >>> peak_of("no-such-chip") is None
    True
    """
    from otel_ext.errors import RegistryError
    from otel_ext.semconv.registry import device_specs

    try:
        spec = device_specs(device_model)
    except RegistryError:  # an unknown model is a missing roof, not an error
        return None
    flops = spec.get(f"peak_flops_{dtype}") or spec.get("peak_flops_bf16")
    bw = spec.get("memory_bandwidth")
    if not flops or not bw:
        return None
    return float(flops), float(bw)


class RooflineRow(TypedDict):
    """One layer name's place under the roofline (roof fields None without a peak)."""

    layer: str
    spans: int
    time_ns: int
    flops: float
    bytes: float
    #: FLOP per byte (None without bytes)
    intensity: float | None
    achieved_flops: float
    achieved_bandwidth: float
    roof_flops: float | None
    pct_of_roof: float | None
    #: ``compute`` or ``memory``
    bound: str | None


def roofline(
    table: EventTable,
    *,
    device_model: str | None = None,
    peak_flops: float | None = None,
    memory_bandwidth: float | None = None,
    limit: int = 100,
) -> list[RooflineRow]:
    """Per layer: FLOP, bytes, time, intensity, achieved FLOP/s and bandwidth, the roof.

    Args:
        table: the event table (layer rows with ``flops``/``bytes_accessed`` >= 0 count).
        device_model: a device model of the registry's spec table, for the peaks.
        peak_flops, memory_bandwidth: explicit peaks (override the model's).
        limit: at most this many layers, most time first.

    Returns:
        One dict per layer name; roof fields are None when no peak is known.
    """
    if device_model and (peak_flops is None or memory_bandwidth is None):
        peaks = peak_of(device_model)
        if peaks:
            peak_flops = peak_flops or peaks[0]
            memory_bandwidth = memory_bandwidth or peaks[1]
    sel = (table["category"] == Category.LAYER) & (table["flops"] >= 0)
    rows = np.flatnonzero(sel)
    if len(rows) == 0:
        return []
    names = table["name"][rows]
    dur = (table["end_ns"][rows] - table["start_ns"][rows]).astype(np.float64)
    flops = table["flops"][rows]
    nbytes = np.clip(table["bytes_accessed"][rows], 0, None)
    un, inv = np.unique(names, return_inverse=True)
    inv = inv.reshape(-1)
    t = np.bincount(inv, weights=dur, minlength=len(un))
    f = np.bincount(inv, weights=flops, minlength=len(un))
    b = np.bincount(inv, weights=nbytes, minlength=len(un))
    n = np.bincount(inv, minlength=len(un))
    ridge = peak_flops / memory_bandwidth if peak_flops and memory_bandwidth else None
    out: list[RooflineRow] = []
    for k in np.argsort(-t, kind="stable")[:limit]:
        secs = t[k] / 1e9
        achieved = f[k] / secs if secs > 0 else 0.0
        intensity = f[k] / b[k] if b[k] > 0 else None
        roof = None
        if peak_flops and memory_bandwidth and intensity is not None:
            roof = float(min(peak_flops, memory_bandwidth * intensity))
        out.append(
            {
                "layer": table.strings["name"][int(un[k])],
                "spans": int(n[k]),
                "time_ns": int(t[k]),
                "flops": float(f[k]),
                "bytes": float(b[k]),
                "intensity": round(float(intensity), 6) if intensity is not None else None,
                "achieved_flops": float(achieved),
                "achieved_bandwidth": float(b[k] / secs) if secs > 0 else 0.0,
                "roof_flops": roof,
                "pct_of_roof": round(float(100.0 * achieved / roof), 4) if roof else None,
                "bound": (
                    None
                    if ridge is None or intensity is None
                    else ("compute" if intensity >= ridge else "memory")
                ),
            }
        )
    return out
