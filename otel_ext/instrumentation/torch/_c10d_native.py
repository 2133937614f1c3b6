"""Build, cache and load the native recording kernels (``_c10d_hook.cpp``).

The C++ source ships with the package. It is compiled once per (source, torch build, Python)
with the system's C++ compiler against the headers and libraries of the installed torch, into
a cache directory (``OTEL_EXT_NATIVE_CACHE``, default ``~/.cache/otel-ext/native``), and
imported from there; later processes load the cached module in milliseconds. A file lock
keeps concurrent ranks from compiling it twice. Prebuild it (as ``make venv`` and CI do) with
``python -m otel_ext.instrumentation.torch._c10d_native``.

:func:`load` never raises: without a compiler, or when the build fails, it returns ``None``
and :data:`STATUS` says why; the instrumentor then uses the pure-Python hook and says so
(logged once, and in ``TorchDistributedInstrumentor.native``).

``OTEL_EXT_TORCH_NATIVE_HOOK``: ``auto`` (default: load, building when needed), ``cached``
(load only an already built module, never compile), ``off`` (always the Python hook).

>>> cache_key("source", torch_version="2.13.0", python="cpython-311") == cache_key(
...     "source", torch_version="2.13.0", python="cpython-311")
True
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

from otel_ext import config

__all__ = ["STATUS", "build", "cache_key", "load", "mode"]

_LOG = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("_c10d_hook.cpp")
_MODES = ("auto", "cached", "off")

#: Why the native hook is or is not in use (``"loaded"`` once it is).
STATUS: dict[str, str] = {"state": "not loaded", "reason": ""}
_module: ModuleType | None = None


def mode() -> str:
    """``OTEL_EXT_TORCH_NATIVE_HOOK`` (``auto``, ``cached`` or ``off``; unset or bad: auto)."""
    raw = config.resolve(config.TORCH_NATIVE_HOOK).strip().lower()
    if raw not in _MODES:
        _LOG.warning(
            "%s=%r is not one of %s; using auto", config.TORCH_NATIVE_HOOK.name, raw, _MODES
        )
        return "auto"
    return raw


def cache_key(source: str, *, torch_version: str, python: str) -> str:
    """The build's identity: a digest of the source, the torch build and the Python ABI."""
    digest = hashlib.sha256(f"{torch_version}\0{python}\0{source}".encode())
    return digest.hexdigest()[:16]


def _cache_dir() -> Path:
    raw = config.resolve(config.NATIVE_CACHE)
    return Path(raw) if raw else Path.home() / ".cache" / "otel-ext" / "native"


def _target() -> tuple[Path, str]:
    import torch

    key = cache_key(
        SOURCE.read_text(encoding="utf-8"),
        torch_version=f"{torch.__version__}+{torch._C._GLIBCXX_USE_CXX11_ABI}",
        python=sys.implementation.cache_tag or "unknown",
    )
    name = f"otel_ext_c10d_hook_{key}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return _cache_dir() / f"{name}{suffix}", name


def _compiler() -> str | None:
    for candidate in (os.environ.get("CXX", "").strip(), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def build(*, quiet: bool = True) -> Path:
    """Compile the module into the cache (if not there yet) and return its path.

    Raises:
        RuntimeError: no C++ compiler, or the compiler failed (its output in the message).
    """
    import torch
    from torch.utils import cpp_extension

    path, name = _target()
    if path.exists():
        return path
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (CXX, c++, g++, clang++)")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank may be building the same module
        if path.exists():
            return path
        if quiet:  # in a workload's instrument(): say why this call takes a while, once
            _LOG.warning(
                "compiling the native collective hook once for this torch build into %s "
                "(about 30 s; later processes load it at once). Prebuild it with `python -m "
                "otel_ext.instrumentation.torch._c10d_native`, or skip native recording with "
                "OTEL_EXT_TORCH_NATIVE_HOOK=cached",
                path.parent,
            )
        libs = cpp_extension.library_paths()
        cmd = [
            cxx,
            "-O2",
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DOTEL_EXT_MODULE_NAME={name}",
            *(f"-I{p}" for p in cpp_extension.include_paths()),
            f"-I{sysconfig.get_paths()['include']}",
            str(SOURCE),
            *(f"-L{p}" for p in libs),
            *(f"-Wl,-rpath,{p}" for p in libs),
            "-lc10",
            "-ltorch_cpu",
            "-o",
        ]
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            out = Path(tmp) / path.name
            began = time.monotonic()
            proc = subprocess.run([*cmd, str(out)], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"compiling {SOURCE.name} failed ({cxx}, exit {proc.returncode}):\n"
                    f"{proc.stderr[-4000:]}"
                )
            os.replace(out, path)
        if not quiet:
            print(f"built {path} in {time.monotonic() - began:.1f} s")
    return path


def _import(path: Path, name: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise RuntimeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The native module, or ``None`` (then :data:`STATUS` says why); never raises."""
    global _module
    if _module is not None:
        return _module
    if STATUS["state"] == "unavailable":
        return None  # tried in this process already (a failed build is not retried)
    chosen = mode()
    if chosen == "off":
        STATUS.update(state="off", reason=f"{config.TORCH_NATIVE_HOOK.name}=off")
        return None
    try:
        path, name = _target()
        if not path.exists():
            if chosen == "cached":
                STATUS.update(state="unavailable", reason=f"not built ({path}); mode cached")
                return None
            _LOG.info("building the native collective hook (once): %s", path)
            path = build()
        _module = _import(path, name)
    except Exception as exc:
        STATUS.update(state="unavailable", reason=f"{type(exc).__name__}: {exc}")
        return None
    STATUS.update(state="loaded", reason=str(path))
    return _module


if __name__ == "__main__":
    print(build(quiet=False))
