"""FLOP and byte estimates of PyTorch modules and of ``scaled_dot_product_attention`` calls.

Thin glue from module hyper-parameters and tensor shapes to
:mod:`otel_ext.instrumentation.estimators`. :func:`module_estimator` returns the estimator
of a module's class (``None`` for classes without one); an estimator takes
``(module, args, kwargs, output)`` and returns ``(flops, bytes)``.

>>> import torch
>>> lin = torch.nn.Linear(4, 3)
>>> x = torch.zeros(2, 4)
>>> module_estimator(lin)(lin, (x,), {}, lin(x))
(48.0, 116.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from torch import nn

from otel_ext.instrumentation import estimators

__all__ = [
    "Estimator",
    "first_tensor",
    "local",
    "local_numel",
    "module_estimator",
    "sdpa_estimate",
]

Estimator = Callable[[nn.Module, tuple[Any, ...], Mapping[str, Any], Any], tuple[float, float]]


def local(t: Any) -> Any:
    """This rank's shard of ``t`` when it is a DTensor (tensor parallelism), else ``t``.

    Under TP a module's weights and activations are DTensors whose ``shape`` and
    ``numel()`` are the global ones; the work this rank does is on its local shard.

    >>> local(torch.zeros(2, 3)).shape
    torch.Size([2, 3])
    """
    to_local = getattr(t, "to_local", None)
    if to_local is not None and isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
        try:
            return to_local()
        except Exception:
            return t
    return t


def local_numel(t: Any) -> int:
    """``numel()`` of this rank's shard of ``t`` (the global count for a plain tensor).

    >>> local_numel(torch.nn.Linear(4, 3).weight)
    12
    """
    return int(local(t).numel())


def first_tensor(
    args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
) -> torch.Tensor | None:
    """The first tensor among ``args`` then ``kwargs`` values (``None`` if there is none)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, torch.Tensor):
                return a
    return None


def _linear(
    m: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> tuple[float, float]:
    x = local(first_tensor(args, kwargs))
    m = cast(nn.Linear, m)
    x = cast(torch.Tensor, x)
    # The local weight's shape: under TP (Colwise / Rowwise) this rank's shard.
    out_features, in_features = local(m.weight).shape
    tokens = x.numel() // in_features
    return estimators.linear(
        in_features,
        out_features,
        tokens=tokens,
        bias=m.bias is not None,
        elem_bytes=x.element_size(),
    )


def _conv(
    m: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> tuple[float, float]:
    x = local(first_tensor(args, kwargs))
    out = local(out)
    m = cast(nn.modules.conv._ConvNd, m)
    x = cast(torch.Tensor, x)
    return estimators.conv(
        in_numel=x.numel(),
        out_numel=out.numel(),
        in_channels=m.in_channels,
        out_channels=m.out_channels,
        kernel_size=tuple(m.kernel_size),
        groups=m.groups,
        bias=m.bias is not None,
        elem_bytes=x.element_size(),
    )


def _layer_norm(
    m: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> tuple[float, float]:
    x = local(first_tensor(args, kwargs))
    m = cast(nn.LayerNorm, m)
    x = cast(torch.Tensor, x)
    normalized = 1
    for d in m.normalized_shape:
        normalized *= d
    return estimators.layer_norm(
        x.numel(), normalized, affine=m.elementwise_affine, elem_bytes=x.element_size()
    )


def _embedding(
    m: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> tuple[float, float]:
    idx = local(first_tensor(args, kwargs))
    m = cast(nn.Embedding, m)
    idx = cast(torch.Tensor, idx)
    return estimators.embedding(
        idx.numel(),
        int(local(m.weight).shape[1]),
        elem_bytes=m.weight.element_size(),
        index_bytes=idx.element_size(),
    )


def _mha(
    m: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
) -> tuple[float, float]:
    m = cast(nn.MultiheadAttention, m)
    names = ("query", "key", "value")
    q, k, _ = (args[i] if i < len(args) else kwargs[names[i]] for i in range(3))
    if q.dim() == 2:  # unbatched (L, E)
        batch, q_len, kv_len = 1, q.shape[0], k.shape[0]
    elif m.batch_first:
        batch, q_len, kv_len = q.shape[0], q.shape[1], k.shape[1]
    else:
        batch, q_len, kv_len = q.shape[1], q.shape[0], k.shape[0]
    return estimators.multihead_attention(
        batch=batch,
        q_len=q_len,
        kv_len=kv_len,
        embed_dim=m.embed_dim,
        heads=m.num_heads,
        kdim=m.kdim,
        vdim=m.vdim,
        bias=m.in_proj_bias is not None,
        elem_bytes=q.element_size(),
    )


_BY_TYPE: dict[type, Estimator] = {
    nn.Linear: _linear,
    nn.Conv1d: _conv,
    nn.Conv2d: _conv,
    nn.Conv3d: _conv,
    nn.LayerNorm: _layer_norm,
    nn.Embedding: _embedding,
    nn.MultiheadAttention: _mha,
}


def module_estimator(module: nn.Module) -> Estimator | None:
    """The estimator for ``module``'s class or its nearest estimable base class, else ``None``."""
    for cls in type(module).__mro__:
        est = _BY_TYPE.get(cls)
        if est is not None:
            return est
    return None


def sdpa_estimate(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[float, float]:
    """Estimate of ``F.scaled_dot_product_attention(query, key, value)`` (shapes ``(..., L, E)``).

    >>> q = torch.zeros(2, 4, 8, 16)
    >>> sdpa_estimate(q, q, q)
    (32768.0, 16384.0)
    """
    lead = 1
    for d in query.shape[:-2]:
        lead *= d
    return estimators.attention(
        batch=lead,
        heads=1,
        q_len=query.shape[-2],
        kv_len=key.shape[-2],
        head_dim=query.shape[-1],
        v_head_dim=value.shape[-1],
        elem_bytes=query.element_size(),
    )
