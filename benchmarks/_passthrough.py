"""A pass-through Python kernel on ``c10d::allreduce_``: the floor of any Python-level hook.

Registered the way the Python collective hook is (``torch.library`` ``impl`` at
``AutogradCPU``, continuing with ``redispatch``) and recording nothing; used alike by
``instrumentation_collectives.py`` ("kernel only") and ``collective_hook_instructions.py``
("python-passthrough"). Keep the returned library alive while it should stay installed;
``lib._destroy()`` removes it.
"""

from __future__ import annotations

import warnings


def passthrough_allreduce_kernel() -> object:
    """Install the kernel; returns its ``torch.library.Library``."""
    import torch

    op = torch.ops.c10d.allreduce_.default
    redispatch, below = op.redispatch, torch._C._after_autograd_keyset

    def kernel(keyset: object, *args: object) -> object:
        return redispatch(keyset & below, *args)  # type: ignore[operator]

    lib = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("allreduce_", kernel, "AutogradCPU", with_keyset=True)
    return lib
