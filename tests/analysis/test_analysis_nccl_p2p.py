"""NCCL point-to-point transfers in profiler traces (cross.nccl_p2p) and the collectives'
transfer phase per host set (cross.collective_host_sets), on synthetic traces whose truth is
known (tests/nccl_p2p_traces.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nccl_p2p_traces import NcclP2pTruth, write_nccl_p2p_job

from otel_ext.analysis.cross.collective_host_sets import collective_host_set_bandwidth
from otel_ext.analysis.cross.collective_match import match_collectives
from otel_ext.analysis.cross.nccl_p2p import P2pEnds, pair_ends, pair_nccl_p2p
from otel_ext.analysis.document import AnalysisDocument
from otel_ext.analysis.engine import analyze
from otel_ext.analysis.loaders import load_paths
from otel_ext.analysis.table import Category, EventTable

SLOW = ("hostA", "hostB")


def _job(
    tmp_path: Path,
    name: str,
    *,
    slow: tuple[str, str] | None = None,
    peer_fields: bool = True,
    kernel_meta: bool = True,
    allreduces: bool = False,
    seed: int = 0,
) -> tuple[Path, NcclP2pTruth]:
    out = tmp_path / name
    out.mkdir()
    truth = write_nccl_p2p_job(out, slow=slow, peer_fields=peer_fields, kernel_meta=kernel_meta,
                               allreduces=allreduces, seed=seed)  # fmt: skip
    return out, truth


def _analyze(folder: Path) -> AnalysisDocument:
    return cast(AnalysisDocument, analyze([str(folder)], workers=1))


def _kinds(doc: AnalysisDocument) -> list[str]:
    return [f["kind"] for f in doc["findings"]]


# ------------------------------------------------------------------------------- pairing


@pytest.mark.parametrize("kernel_meta", [True, False])
def test_pairing_counts_and_bytes(tmp_path: Path, kernel_meta: bool) -> None:
    """Every send meets its receive; bytes per rank pair as planted; the kernels' times (the
    CPU ops end before the transfer)."""
    folder, truth = _job(tmp_path, "job", slow=SLOW, kernel_meta=kernel_meta)
    table = load_paths([folder], workers=1).table
    p = pair_nccl_p2p(table)
    assert (p.sends, p.recvs, p.unpaired_sends, p.unpaired_recvs) == (48, 48, 0, 0)
    assert len(p.transfers) == truth.transfers == 48
    got: dict[str, int] = {}
    for s, d, b in zip(p.transfers.src_rank.tolist(), p.transfers.dst_rank.tolist(),
                       p.transfers.nbytes.tolist()):  # fmt: skip
        got[f"{s}->{d}"] = got.get(f"{s}->{d}", 0) + b
    assert got == truth.bytes_by_pair
    slow = p.transfers.transfer_ns[(p.transfers.src_rank == 1) & (p.transfers.dst_rank == 2)]
    expected = truth.nbytes / (12.5e9 / 8) * 1e9  # the slow direction's rate
    assert 0.7 < float(np.median(slow)) / expected < 1.3


def test_partner_missing_is_counted_not_paired(tmp_path: Path) -> None:
    folder, _ = _job(tmp_path, "job")
    (folder / "rank2.json").unlink()  # rank 1's sends to 2 and rank 3's receives from 2 lose theirs
    p = pair_nccl_p2p(load_paths([folder], workers=1).table)
    assert len(p.transfers) == 24
    assert (p.unpaired_sends, p.unpaired_recvs) == (12, 12)


def test_no_peer_fields_no_pairs(tmp_path: Path) -> None:
    """Older PyTorch (no Dst Rank / Src Rank): nothing paired, the network section as before."""
    folder, _ = _job(tmp_path, "job", slow=SLOW, peer_fields=False)
    table = load_paths([folder], workers=1).table
    assert not (table["coll_peer"] >= 0).any()
    p = pair_nccl_p2p(table)
    assert len(p.transfers) == 0 and p.sends == 0
    doc = _analyze(folder)
    assert doc["network"]["peers_known"] is False
    assert doc["network"]["paths"] == []
    assert "collective_transfer" not in doc["network"]


def test_fast_path_equals_careful_path_with_peers(tmp_path: Path) -> None:
    from otel_ext.analysis.loaders._common import LoadContext
    from otel_ext.analysis.loaders._kineto_fast import decode_fast
    from otel_ext.analysis.loaders.kineto import load_kineto_careful, load_kineto_text

    folder, _ = _job(tmp_path, "job", kernel_meta=False)
    text = (folder / "rank1.json").read_text()
    doc = json.loads(text)
    args = doc["traceEvents"][1]["args"]  # a receive's record_param_comms
    args["Src Rank"] = str(args["Src Rank"])  # a digit string reads as the number
    text = json.dumps(doc)
    assert decode_fast(text.encode()) is not None
    fast = load_kineto_text(text, path="r1.json")
    careful = load_kineto_careful(text, path="r1.json", ctx=LoadContext("r1.json"))
    for c in ("coll_peer", "coll_op", "coll_bytes", "category"):
        assert np.array_equal(fast[c], careful[c]), c
    kern = fast["category"] == Category.KERNEL_COMM
    assert sorted(set(fast["coll_peer"][kern].tolist())) == [0, 2]  # inherited by the kernels


# ------------------------------------------------------------------------------ findings


def test_slow_direction_named_and_no_straggler(tmp_path: Path) -> None:
    folder, truth = _job(tmp_path, "job", slow=SLOW)
    doc = _analyze(folder)
    net = doc["network"]
    assert net["peers_known"] is True
    slow = [p["path"] for p in net["paths"] if p["slow"]]
    assert slow == [truth.slow_path]
    kinds = _kinds(doc)
    assert kinds.count("slow-network-path") == 1
    finding = next(f for f in doc["findings"] if f["kind"] == "slow-network-path")
    assert finding["evidence"]["hosts"] == ["hostA", "hostB"]
    assert "straggler" not in kinds and "slow-rank" not in kinds


def test_healthy_job_no_network_finding(tmp_path: Path) -> None:
    folder, _ = _job(tmp_path, "job", seed=3)
    doc = _analyze(folder)
    assert doc["network"]["peers_known"] is True
    assert not any(p["slow"] for p in doc["network"]["paths"])
    assert {"slow-network-path", "straggler", "slow-transfers"}.isdisjoint(_kinds(doc))


# ------------------------------------------------------------------------------ property


@st.composite
def p2p_ends(draw: st.DrawFn) -> P2pEnds:
    n = draw(st.integers(0, 60))
    rank = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    peer = [(r + draw(st.integers(1, 3))) % 4 for r in rank]
    return P2pEnds(
        rank=np.asarray(rank, dtype=np.int64),
        peer=np.asarray(peer, dtype=np.int64),
        group=np.asarray(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64),
        is_send=np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        start_ns=np.asarray(
            draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)), np.int64
        ),
        end_ns=np.full(n, 10**7, dtype=np.int64),
        nbytes=np.full(n, 8, dtype=np.int64),
    )


@settings(max_examples=150, deadline=None)
@given(p2p_ends())
def test_pairing_never_crosses_groups_or_directions_and_loses_nothing(e: P2pEnds) -> None:
    s, r = pair_ends(e)
    assert e.is_send[s].all() and not e.is_send[r].any()
    assert np.array_equal(e.group[s], e.group[r])  # one process group
    assert np.array_equal(e.rank[s], e.peer[r]) and np.array_equal(e.peer[s], e.rank[r])
    assert len(set(s.tolist())) == len(s) and len(set(r.tolist())) == len(r)
    # nothing lost: per (group, source, destination), min(sends, receives) pairs
    sends: dict[tuple[int, int, int], int] = {}
    recvs: dict[tuple[int, int, int], int] = {}
    for g, a, b, snd in zip(e.group.tolist(), e.rank.tolist(), e.peer.tolist(),
                            e.is_send.tolist()):  # fmt: skip
        if snd:
            sends[(g, a, b)] = sends.get((g, a, b), 0) + 1
        else:
            recvs[(g, b, a)] = recvs.get((g, b, a), 0) + 1
    assert len(s) == sum(min(c, recvs.get(k, 0)) for k, c in sends.items())
    # the k-th send of a key meets the k-th receive (time order on each side)
    for i, j in zip(s.tolist(), r.tolist()):
        same_s = (e.group == e.group[i]) & (e.rank == e.rank[i]) & (e.peer == e.peer[i])
        same_r = (e.group == e.group[j]) & (e.rank == e.rank[j]) & (e.peer == e.peer[j])
        k_s = _ordinal(e, same_s & e.is_send, i)
        k_r = _ordinal(e, same_r & ~e.is_send, j)
        assert k_s == k_r


def _ordinal(e: P2pEnds, mask: np.ndarray, i: int) -> int:
    idx = np.flatnonzero(mask)
    order = idx[np.lexsort((idx, e.start_ns[idx]))]
    return int(np.flatnonzero(order == i)[0])


# ------------------------------------------------------------- collectives per host set


def _collectives(spec: list[tuple[str, tuple[int, ...], int]], n: int) -> EventTable:
    rows = []
    for seq in range(n):
        for grp, ranks, dur in spec:
            t0 = seq * 100_000_000
            rows += [dict(rank=r, category=Category.KERNEL_COMM, coll_op="allreduce",
                          coll_group=grp, coll_seq=seq, coll_bytes=1 << 24,
                          coll_group_size=len(ranks), start_ns=t0, end_ns=t0 + dur)
                     for r in ranks]  # fmt: skip
    return EventTable.from_rows(rows)


def test_host_set_bandwidth_against_within_host() -> None:
    t = _collectives([("a", (0, 1), 1_000_000), ("b", (2, 3), 1_000_000),
                      ("x", (0, 1, 2, 3), 6_000_000)], 5)  # fmt: skip
    hosts = {0: "hA", 1: "hA", 2: "hB", 3: "hB"}
    rows = collective_host_set_bandwidth(match_collectives(t), hosts)
    got = [(r.host_set, r.hosts, r.instances, r.size_class_bytes) for r in rows]
    assert got == [("hA", 1, 5, 1 << 24), ("hB", 1, 5, 1 << 24), ("hA+hB", 2, 5, 1 << 24)]
    cross = rows[-1]
    # bus bandwidth: 2 ranks (factor 1) in 1 ms against 4 ranks (factor 1.5) in 6 ms
    assert cross.ratio == pytest.approx(1.5 / 6, rel=1e-3)
    assert rows[0].ratio == 1.0


def test_host_set_bandwidth_needs_both_kinds_and_known_hosts() -> None:
    within_only = _collectives([("a", (0, 1), 1_000_000)], 3)
    assert collective_host_set_bandwidth(match_collectives(within_only), {0: "h", 1: "h"}) == []
    t = _collectives([("a", (0, 1), 1_000_000), ("x", (0, 2), 5_000_000)], 3)
    m = match_collectives(t)
    assert collective_host_set_bandwidth(m, {0: "hA", 1: "hA"}) == []  # rank 2's host unknown
    assert len(collective_host_set_bandwidth(m, {0: "hA", 1: "hA", 2: "hB"})) == 2


def test_collective_transfer_section_in_the_document(tmp_path: Path) -> None:
    """All-reduces within each host and across both: the network section gains the host
    sets' transfer-phase bandwidth; the point-to-point paths are unchanged by them."""
    folder, _ = _job(tmp_path, "job", allreduces=True, slow=SLOW)
    doc = _analyze(folder)
    rows = doc["network"]["collective_transfer"]
    assert [(r["host_set"], r["op"], r["hosts"]) for r in rows] == [
        ("hostA", "allreduce", 1),
        ("hostB", "allreduce", 1),
        ("hostA+hostB", "allreduce", 2),
    ]
    within_a, within_b, cross = rows
    assert 0.9 < within_a["ratio"] < 1.1 and 0.9 < within_b["ratio"] < 1.1
    # busbw: 2 ranks at 50 GB/s within hostA, 4 ranks at 12.5 GB/s across: a quarter
    assert 0.15 < cross["ratio"] < 0.35
    assert [p["path"] for p in doc["network"]["paths"] if p["slow"]] == ["hostA->hostB"]
    assert "straggler" not in _kinds(doc)
    # the terminal report shows the section beside the paths
    from otel_ext.analysis.report.text import render_text

    text = render_text(doc)
    assert "Collectives' transfer phase by hosts" in text
    assert any(line.split()[:2] == ["hostA+hostB", "allreduce"] for line in text.splitlines())
