"""The per-request share of an engine step: one rule for the online accounting of the
inference instrumentation and for the analysis (no dependency, so both can import it cheaply).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["token_shares"]


def token_shares(
    prefill_tokens: Sequence[int], decode_tokens: Sequence[int], costs: Mapping[str, float]
) -> list[float]:
    """Each request's share of one engine step (the shares sum to 1).

    The rule: request ``r`` weighs ``c_p·p_r + c_d·d_r + c_s·(p_r + d_r)/T`` with ``p_r``, ``d_r``
    its prompt and generated tokens in the step, ``T`` the step's tokens and ``costs`` the
    measured cost of a prefill token, a decode token and a step (``prefill_ns_per_token``,
    ``decode_ns_per_token``, ``step_ns``). A step without tokens is split equally.

    >>> token_shares([30, 0], [0, 1], {"prefill_ns_per_token": 2.0, "decode_ns_per_token": 1.0,
    ...                                "step_ns": 0.0})
    [0.9836065573770492, 0.01639344262295082]
    >>> token_shares([0, 0], [0, 0], {"prefill_ns_per_token": 1.0, "decode_ns_per_token": 1.0,
    ...                               "step_ns": 0.0})
    [0.5, 0.5]
    """
    n = len(prefill_tokens)
    tokens = [p + d for p, d in zip(prefill_tokens, decode_tokens)]
    total = sum(tokens)
    if n == 0:
        return []
    if total <= 0:
        return [1.0 / n] * n
    cp, cd, cs = (
        float(costs["prefill_ns_per_token"]),
        float(costs["decode_ns_per_token"]),
        float(costs["step_ns"]),
    )
    w = [cp * p + cd * d + cs * t / total for p, d, t in zip(prefill_tokens, decode_tokens, tokens)]
    s = sum(w)
    return [x / s for x in w] if s > 0 else [t / total for t in tokens]
