"""Nearest-neighbour search over the memory bank with faiss.

`flat` (default) is exact L2. `ivf` (inverted lists) and `ivfpq` (inverted lists + product
quantisation) trade exactness for speed and memory on large banks; with nprobe = nlist, `ivf`
is exact again. Distances returned are Euclidean (faiss returns squared L2).

A flat index is stored and persisted as faiss's IndexFlatL2, but searched by a blocked GEMM in
torch over the index's own vectors (a zero-copy view): on 1-2 CPU threads faiss's flat search
measured 3-4x slower than the same exact computation through torch's BLAS (benchmarks/anomaly_speed.py).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import faiss
import numpy as np
import torch

INDEX_KINDS = ("flat", "ivf", "ivfpq")


def build_index(bank: np.ndarray, kind: str = "flat", *, nlist: int | None = None, nprobe: int = 8,
                pq_m: int | None = None, pq_bits: int = 8, seed: int = 0) -> faiss.Index:
    """An index over bank (M, D) float32.

    nlist defaults to about 4 sqrt(M) (at most M // 39 so each list gets enough training points);
    pq_m (sub-quantisers) defaults to the largest divisor of D that is <= D // 4 and <= 64.
    """
    x = np.ascontiguousarray(bank, dtype=np.float32)                 # (M, D)
    m, d = x.shape
    if kind == "flat":
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


def knn_exact(bank: np.ndarray, queries: np.ndarray, k: int = 1, block_bytes: int = 1 << 22, min_rows: int = 128
              ) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest rows of bank (M, D) for queries (Q, D): ||q||^2 + ||b||^2 - 2 q.b by torch GEMM,
    in query blocks of about `block_bytes` of distances (at least `min_rows` queries). Euclidean (Q, k) float32,
    indices (Q, k) int64. Blocks that stay in cache (4 MB) make the GEMM and its minimum 1.5-3x faster than
    64 MB ones on the narrow pooled banks (38-96 channels), where the distance matrix, not the GEMM, is the work."""
    b = torch.as_tensor(bank)                                        # (M, D), shares memory
    q = torch.as_tensor(queries)                                     # (Q, D)
    bb = (b * b).sum(1)                                              # (M,)
    k = min(k, len(b))
    step = max(min_rows, block_bytes // (4 * len(b)))
    dist = torch.empty(len(q), k)
    idx = torch.empty(len(q), k, dtype=torch.int64)
    for i in range(0, len(q), step):
        qi = q[i:i + step]                                           # (s, D)
        d2 = torch.addmm(bb[None, :], qi, b.T, alpha=-2.0)           # (s, M) = ||b||^2 - 2 q.b
        v, j = (d2.min(1, keepdim=True) if k == 1 else d2.topk(k, dim=1, largest=False))
        dist[i:i + step] = (v + (qi * qi).sum(1, keepdim=True)).clamp_(min=0).sqrt_()
        idx[i:i + step] = j
    return dist.numpy(), idx.numpy()


def knn(index: faiss.Index, queries: np.ndarray, k: int = 1, batch: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distances (Q, k) float32 and bank indices (Q, k) int64 of the k nearest entries."""
    q = np.ascontiguousarray(queries, dtype=np.float32)              # (Q, D)
    if q.shape[1] != index.d:
        raise ValueError(f"queries have {q.shape[1]} features but the index holds {index.d}")
    bank = flat_vectors(index)
    if bank is not None:
        return knn_exact(bank, q, k)
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
