"""The order statistics of ``otel_ext._arrays`` give numpy's results, value for value, and
never import ``numpy.ma``; the communication-kernel prefilter never changes a verdict."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from otel_ext._arrays import distinct, distinct_rows, median, percentile
from otel_ext.analysis import classify

_INTS = st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64])
_FLOATS = st.sampled_from([np.float32, np.float64])


def _int_arrays(min_size: int = 0) -> st.SearchStrategy[np.ndarray]:
    return _INTS.flatmap(
        lambda t: hnp.arrays(t, st.integers(min_size, 300), elements=hnp.from_dtype(np.dtype(t)))
    )


def _float_arrays(min_size: int = 0) -> st.SearchStrategy[np.ndarray]:
    return _FLOATS.flatmap(
        lambda t: hnp.arrays(
            t,
            st.integers(min_size, 300),
            elements=hnp.from_dtype(np.dtype(t), allow_infinity=False),
        )
    )


@given(st.one_of(_int_arrays(), _float_arrays(), hnp.arrays(bool, st.integers(0, 50))))
@settings(max_examples=300, deadline=None)
def test_distinct_is_numpy_unique(a: np.ndarray) -> None:
    got, want = distinct(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@given(st.integers(-(2**62), 2**62), st.integers(1, 1000))
def test_distinct_of_a_constant_column(v: int, n: int) -> None:
    c = np.broadcast_to(np.int64(v), n)
    c.flags.writeable = False
    assert distinct(c).tolist() == [v]


def test_distinct_of_a_wide_range_sorts() -> None:
    a = np.array([2**60, -(2**60), 5, 2**60], dtype=np.int64)
    assert distinct(a).tolist() == [-(2**60), 5, 2**60]


@given(st.one_of(_int_arrays(1), _float_arrays(1)))
@settings(max_examples=300, deadline=None)
def test_median_is_numpy_median(a: np.ndarray) -> None:
    with np.errstate(all="ignore"):
        want = np.median(a)
        got = median(a)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_median_of_nothing_is_nan() -> None:
    assert np.isnan(median(np.array([], dtype=np.float64)))


@given(
    st.one_of(_int_arrays(1), _float_arrays(1)),
    st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=5),
)
@settings(max_examples=300, deadline=None)
def test_percentile_is_numpy_percentile(a: np.ndarray, qs: list[float]) -> None:
    with np.errstate(all="ignore"):
        want = np.percentile(a, qs)
        got = percentile(a, qs)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.asarray(percentile(a, qs[0])), np.asarray(want[0]))


def test_percentile_rejects_what_numpy_rejects() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="range"):
        percentile([1, 2], 101)


def test_no_numpy_ma_import() -> None:
    """The point of the module: the first call does not import ``numpy.ma`` (10 ms, 1.3 MB)."""
    code = (
        "import sys, numpy as np\n"
        "from otel_ext._arrays import distinct, distinct_rows, median, percentile\n"
        "a = np.arange(100.0)\n"
        "distinct(a); distinct(a.astype(int)); median(a); percentile(a, [50, 99])\n"
        "distinct_rows(np.stack([a, a], axis=1))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['numpy', 'ma']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_FRAGMENTS = st.sampled_from(
    ["nccl", "NCCL", "Kernel", "kernel", "_KERNEL", "rccl", "msccl", "ep::", "intranode",
     "::dispatch", "deep_ep", "nvshmem", "one_shot_all_reduce", "multimem_all_gather",
     "cross_device_reduce", "userbuffers_", "all_to_all", "alltoall", "reduce_scatter", "::",
     " ", ":", "(", "<", "\u212a", "\u017f", "\u0130", "\u0131", "ß", "void ", "gemm", "x"]
)  # fmt: skip


@given(st.lists(_FRAGMENTS, max_size=8).map("".join))
@settings(max_examples=1000, deadline=None)
def test_comm_prefilter_never_changes_a_verdict(name: str) -> None:
    assert classify.is_comm_kernel_name(name) == (classify._COMM_NAME_RE.search(name) is not None)


@given(st.text(max_size=60))
def test_comm_prefilter_on_any_text(name: str) -> None:
    assert classify.is_comm_kernel_name(name) == (classify._COMM_NAME_RE.search(name) is not None)


@given(hnp.arrays(np.int64, st.tuples(st.integers(0, 40), st.integers(1, 3)),
                  elements=st.integers(-5, 5)))  # fmt: skip
def test_distinct_rows_is_numpy_unique_rows(a: np.ndarray) -> None:
    np.testing.assert_array_equal(distinct_rows(a), np.unique(a, axis=0))
