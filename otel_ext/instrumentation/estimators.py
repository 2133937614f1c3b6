"""FLOP and memory-byte estimates of the common layers, from shapes only (no framework).

Conventions, chosen so the estimates agree with ``torch.utils.flop_counter``:

* FLOPs count the matrix products and convolutions, two per multiply-add; element-wise bias
  additions, softmax and activations are not counted. Layer norm, which has no product, counts
  its element-wise work (5 per element with an affine transform, 4 without), and embedding
  lookups count none.
* Bytes are the compulsory traffic of the call: inputs read, weights read, outputs written
  (an attention kernel is assumed fused: the score matrix is not materialised).

Each function returns ``(flops, bytes)`` as floats. The backward pass of a layer with weights
costs about twice its forward FLOPs (:data:`BACKWARD_FLOP_FACTOR`).

>>> linear(512, 1024, tokens=8, bias=True, elem_bytes=2)
(8388608.0, 1075200.0)
>>> attention(batch=1, heads=8, q_len=128, kv_len=128, head_dim=64, elem_bytes=2)
(33554432.0, 524288.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "BACKWARD_FLOP_FACTOR",
    "attention",
    "conv",
    "embedding",
    "layer_norm",
    "linear",
    "multihead_attention",
]

#: Backward FLOPs relative to forward (input gradients plus weight gradients).
BACKWARD_FLOP_FACTOR = 2.0


def linear(
    in_features: int, out_features: int, *, tokens: int, bias: bool, elem_bytes: int
) -> tuple[float, float]:
    """``y = x W^T + b`` over ``tokens`` rows.

    >>> linear(4, 3, tokens=2, bias=False, elem_bytes=4)
    (48.0, 104.0)
    """
    flops = 2.0 * tokens * in_features * out_features
    weights = in_features * out_features + (out_features if bias else 0)
    nbytes = (tokens * in_features + weights + tokens * out_features) * elem_bytes
    return flops, float(nbytes)


def conv(
    *,
    in_numel: int,
    out_numel: int,
    in_channels: int,
    out_channels: int,
    kernel_size: Sequence[int],
    groups: int,
    bias: bool,
    elem_bytes: int,
) -> tuple[float, float]:
    """A 1-D/2-D/3-D convolution producing ``out_numel`` output elements.

    >>> conv(in_numel=3*8*8, out_numel=4*6*6, in_channels=3, out_channels=4,
    ...      kernel_size=(3, 3), groups=1, bias=False, elem_bytes=4)
    (7776.0, 1776.0)
    """
    per_output = (in_channels // groups) * math.prod(kernel_size)
    flops = 2.0 * out_numel * per_output
    weights = out_channels * per_output + (out_channels if bias else 0)
    return flops, float((in_numel + weights + out_numel) * elem_bytes)


def layer_norm(
    numel: int, normalized_numel: int, *, affine: bool, elem_bytes: int
) -> tuple[float, float]:
    """Layer norm over ``numel`` elements (the affine weights have ``normalized_numel`` each).

    >>> layer_norm(1024, 256, affine=True, elem_bytes=4)
    (5120.0, 10240.0)
    """
    flops = float(numel * (5 if affine else 4))
    weights = 2 * normalized_numel if affine else 0
    return flops, float((2 * numel + weights) * elem_bytes)


def embedding(
    indices: int, dim: int, *, elem_bytes: int, index_bytes: int = 8
) -> tuple[float, float]:
    """Gathering ``indices`` rows of width ``dim``: no FLOPs, rows read and written.

    >>> embedding(16, 32, elem_bytes=4)
    (0.0, 4224.0)
    """
    return 0.0, float(2 * indices * dim * elem_bytes + indices * index_bytes)


def attention(
    *,
    batch: int,
    heads: int,
    q_len: int,
    kv_len: int,
    head_dim: int,
    v_head_dim: int | None = None,
    elem_bytes: int,
) -> tuple[float, float]:
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d)) V`` (two batched products).

    >>> attention(batch=2, heads=1, q_len=3, kv_len=5, head_dim=4, elem_bytes=4)
    (480.0, 512.0)
    """
    dv = head_dim if v_head_dim is None else v_head_dim
    bh = batch * heads
    flops = 2.0 * bh * q_len * kv_len * head_dim + 2.0 * bh * q_len * kv_len * dv
    elems = bh * (q_len * head_dim + kv_len * head_dim + kv_len * dv + q_len * dv)
    return flops, float(elems * elem_bytes)


def multihead_attention(
    *,
    batch: int,
    q_len: int,
    kv_len: int,
    embed_dim: int,
    heads: int,
    kdim: int | None = None,
    vdim: int | None = None,
    bias: bool = True,
    elem_bytes: int,
) -> tuple[float, float]:
    """``nn.MultiheadAttention``: the Q/K/V projections, attention, and the output projection.

    >>> multihead_attention(batch=1, q_len=4, kv_len=4, embed_dim=8, heads=2, elem_bytes=4)[0]
    2560.0
    """
    kd = embed_dim if kdim is None else kdim
    vd = embed_dim if vdim is None else vdim
    e = embed_dim
    proj = 2.0 * batch * (q_len * e * e + kv_len * kd * e + kv_len * vd * e + q_len * e * e)
    attn, _ = attention(
        batch=batch,
        heads=heads,
        q_len=q_len,
        kv_len=kv_len,
        head_dim=e // heads,
        elem_bytes=elem_bytes,
    )
    weights = e * e + kd * e + vd * e + e * e + (4 * e if bias else 0)
    io = batch * (q_len * e + kv_len * kd + kv_len * vd + q_len * e)
    return proj + attn, float((weights + io) * elem_bytes)
