"""Nearest-neighbour search over the memory bank with faiss.

`flat` (default) is exact L2. `ivf` (inverted lists) and `ivfpq` (inverted lists + product
quantisation) trade exactness for speed and memory on large banks; with nprobe = nlist, `ivf`
is exact again. Distances returned are Euclidean (faiss returns squared L2).

A flat index is stored and persisted as faiss's IndexFlatL2, but searched by a blocked GEMM in
torch over the index's own vectors (a zero-copy view): on 1-2 CPU threads faiss's flat search
measured 3-4x slower than the same exact computation through torch's BLAS (benchmarks/anomaly_speed.py).

`flat-bf16` stores the same flat index but, on CPUs with AMX (bf16 matrix units), shortlists 4 candidates
per query with a bf16 GEMM and ranks them by fp32 distance (`knn(..., screen=4)`): ~1.6x faster search,
the distance of the row returned is exact, and the row is the true nearest one except in near-ties within
bf16 rounding (benchmarks/anomaly_speed.py, 9,408 queries, two runs: 99.98% and 99.99% the same row, worst
distance error 0.026 against a median nearest distance of 1.36). Without AMX it searches like `flat`. Not the default: results then
depend, in the last digits, on the CPU they ran on.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import faiss
import numpy as np
import torch

INDEX_KINDS = ("flat", "flat-bf16", "ivf", "ivfpq")


def build_index(bank: np.ndarray, kind: str = "flat", *, nlist: int | None = None, nprobe: int = 8,
                pq_m: int | None = None, pq_bits: int = 8, seed: int = 0) -> faiss.Index:
    """An index over bank (M, D) float32.

    nlist defaults to about 4 sqrt(M) (at most M // 39 so each list gets enough training points);
    pq_m (sub-quantisers) defaults to the largest divisor of D that is <= D // 4 and <= 64.
    """
    x = np.ascontiguousarray(bank, dtype=np.float32)                 # (M, D)
    m, d = x.shape
    if kind in ("flat", "flat-bf16"):          # the same stored index; flat-bf16 only searches differently
        index = faiss.IndexFlatL2(d)
    elif kind in ("ivf", "ivfpq"):
        nlist = nlist or max(1, min(int(4 * math.sqrt(m)), m // 39))
        quantizer = faiss.IndexFlatL2(d)
        if kind == "ivf":
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_L2)
        else:
            pq_m = pq_m or max(k for k in range(1, min(64, max(1, d // 4)) + 1) if d % k == 0)
            if d % pq_m:
                raise ValueError(f"pq_m={pq_m} must divide the feature dimension {d}")
            if m < 2 ** pq_bits:
                raise ValueError(f"ivfpq with {pq_bits}-bit codes needs >= {2 ** pq_bits} bank entries, "
                                 f"the bank has {m}; use index='flat' or 'ivf'")
            index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, pq_bits)
        index.cp.seed = seed
        index.train(x)
        index.nprobe = min(nprobe, nlist)
    else:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {INDEX_KINDS}")
    index.add(x)
    return index


def flat_vectors(index: faiss.Index) -> np.ndarray | None:
    """(M, D) float32 view of an exact L2 flat index's vectors (no copy), or None for other indexes."""
    if isinstance(index, faiss.IndexFlat) and index.metric_type == faiss.METRIC_L2 and index.ntotal:
        return faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
    return None


def bf16_matmul_is_fast() -> bool:
    """True on CPUs with AMX tiles, where a bf16 GEMM runs ~7x faster than fp32 on one core."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe()) if probe is not None else False


def knn_exact(bank: np.ndarray, queries: np.ndarray, k: int = 1, block_bytes: int = 1 << 26,
              screen: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest rows of bank (M, D) for queries (Q, D): ||q||^2 + ||b||^2 - 2 q.b by torch GEMM,
    in query blocks of at most `block_bytes` of distances. Euclidean (Q, k) float32, indices (Q, k) int64.

    screen: shortlist this many candidates per query with a bf16 GEMM, then rank the shortlist by exact
    fp32 distances (returned distances are always exact fp32 distances to the returned rows). The
    shortlist misses the true neighbour only when `screen` other rows lie within bf16 rounding
    (~0.4% of ||q|| ||b||) of it, and then the returned distance exceeds the true one by at most that.
    None: the plain fp32 GEMM (default where bf16 is not fast, see `bf16_matmul_is_fast`).
    """
    b = torch.as_tensor(bank)                                        # (M, D), shares memory
    q = torch.as_tensor(queries)                                     # (Q, D)
    bb = (b * b).sum(1)                                              # (M,)
    k = min(k, len(b))
    screen = min(screen, len(b)) if screen else None
    if screen is not None and screen < k:
        raise ValueError(f"screen={screen} must be at least k={k}")
    if screen:   # distances do not change under a shift: centre on the bank mean so bf16 keeps the spread
        mu = b.mean(0)                                               # (D,)
        bc = b - mu                                                  # (M, D)
        b16, bb16 = bc.bfloat16(), (bc * bc).sum(1).bfloat16()
    step = max(1, block_bytes // (4 * len(b)))
    dist = torch.empty(len(q), k)
    idx = torch.empty(len(q), k, dtype=torch.int64)
    for i in range(0, len(q), step):
        qi = q[i:i + step]                                           # (s, D)
        if screen:
            approx = torch.addmm(bb16[None, :], (qi - mu).bfloat16(), b16.T, alpha=-2.0)   # (s, M) bf16
            cand = approx.topk(screen, dim=1, largest=False).indices                 # (s, c)
            d2 = (b[cand] - qi[:, None, :]).square_().sum(2)                         # (s, c) exact fp32
            v, j = d2.min(1, keepdim=True) if k == 1 else d2.topk(k, dim=1, largest=False)
            dist[i:i + step] = v.sqrt_()
            idx[i:i + step] = cand.gather(1, j)
            continue
        d2 = torch.addmm(bb[None, :], qi, b.T, alpha=-2.0)           # (s, M) = ||b||^2 - 2 q.b
        v, j = (d2.min(1, keepdim=True) if k == 1 else d2.topk(k, dim=1, largest=False))
        dist[i:i + step] = (v + (qi * qi).sum(1, keepdim=True)).clamp_(min=0).sqrt_()
        idx[i:i + step] = j
    return dist.numpy(), idx.numpy()


def knn(index: faiss.Index, queries: np.ndarray, k: int = 1, batch: int = 65536, bf16_screen: bool = False
        ) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distances (Q, k) float32 and bank indices (Q, k) int64 of the k nearest entries.
    bf16_screen: on a flat index, search like `flat-bf16` (AMX CPUs, >= 256 queries; see the module doc)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)              # (Q, D)
    if q.shape[1] != index.d:
        raise ValueError(f"queries have {q.shape[1]} features but the index holds {index.d}")
    bank = flat_vectors(index)
    if bank is not None:
        screen = max(4, 2 * k) if bf16_screen and len(q) >= 256 and bf16_matmul_is_fast() else None
        return knn_exact(bank, q, k, screen=screen)
    dist = np.empty((len(q), k), np.float32)
    idx = np.empty((len(q), k), np.int64)
    for i in range(0, len(q), batch):
        d2, ii = index.search(q[i:i + batch], k)
        dist[i:i + batch] = np.sqrt(np.maximum(d2, 0))
        idx[i:i + batch] = ii
    return dist, idx


def save_index(index: faiss.Index, path: str | os.PathLike) -> None:
    faiss.write_index(index, str(path))


def load_index(path: str | os.PathLike) -> faiss.Index:
    path = Path(path)
    return faiss.read_index(str(path))
