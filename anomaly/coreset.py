"""The sampler: a greedy k-center (minimax) coreset over a random projection, as in PatchCore (`coreset_bank`).

Greedy k-center repeatedly adds the point farthest from the centres chosen so far; the chosen
set covers every point within twice the optimal radius. Distances are taken after a seeded
Gaussian random projection to `proj_dim` dimensions (Johnson-Lindenstrauss), so the work is
on an (N, proj_dim) float32 matrix: memory O(N d), never an N x N matrix.

Exact speed-up by lazy batching: the textbook loop streams all N points once per centre
(memory-bound matrix-vector products). Here the T points farthest from the current centres are
taken as candidates; as long as the best candidate, after updating the candidates against the
centres picked in this round, is still at least as far as the (T+1)-th farthest point was, it
is the exact greedy choice (distances only shrink). Only then are all N points updated, once
per round, with one matrix-matrix product against all the round's centres (compute-bound).
The selection equals the textbook loop (`greedy_kcenter_reference`) up to float ties.

The cost is still about N * n * k multiply-adds for n centres, quadratic in N at a fixed ratio (n = ratio * N):
734,608 rows -> 73,461 centres is ~4e12. `coreset_size` with a knee lets the bank grow as sqrt(knee * N) past
`knee` rows, and `cover` chooses the centres to cover a seeded random sample of cover * n rows instead of all N (the
rows outside the sample are covered only as well as a random sample predicts: benchmarks/anomaly_fit_speed.py
measures what that costs in quality); with both the cost grows about linearly in N (m * n = cover * ratio^2 * knee * N).
`greedy_coreset(..., knee=None, cover=None)` is the exact selection.

When the features do not fit at once, `chunked_coreset` reduces each chunk to an oversampled
coreset and then takes the coreset of the union.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator

import numpy as np
import torch
from frozenvit.backbone.suite.progress import progress_bar


def random_projection(x: np.ndarray, proj_dim: int | None, seed: int = 0, chunk: int = 65536) -> np.ndarray:
    """(N, D) -> (N, min(D, proj_dim)) float32 with a seeded Gaussian matrix scaled by 1/sqrt(k).

    Projects row-chunks so `x` may be a memory map. Returns x as float32 when D <= proj_dim.
    """
    n, d = x.shape
    if proj_dim is None or d <= proj_dim:
        return np.ascontiguousarray(x, dtype=np.float32)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, proj_dim, generator=g) / math.sqrt(proj_dim)  # (D, k)
    out = torch.empty(n, proj_dim)                                   # (N, k)
    for i in range(0, n, chunk):
        out[i:i + chunk] = torch.as_tensor(np.asarray(x[i:i + chunk], np.float32)) @ w
    return out.numpy()


def _sqdist(z: torch.Tensor, zz: torch.Tensor, c: torch.Tensor, cc: torch.Tensor) -> torch.Tensor:
    """Squared distances of rows z (M, k) (squared norms zz (M,)) to rows c (B, k) (norms cc (B,)) -> (M, B)."""
    return (zz[:, None] + cc[None, :] - 2.0 * (z @ c.T)).clamp_(min=0)


def greedy_kcenter(z: np.ndarray, n: int, start: int = 0, candidates: int = 2048,
                   progress: bool | None = False) -> np.ndarray:
    """Indices (n,) of the greedy k-center selection on z (N, k), starting from row `start`.

    progress: a tqdm bar over selected centres (None: only on a terminal)."""
    zt = torch.as_tensor(np.ascontiguousarray(z, np.float32))       # (N, k)
    zt = zt - zt.mean(0)                 # (N, k): distances unchanged, |z|^2 small, so |a|^2 + |b|^2 - 2ab stays exact
    N = zt.shape[0]
    n = min(n, N)
    zz = torch.linalg.vector_norm(zt, dim=1).square_()               # (N,), no (N, k) temporary
    mind = _sqdist(zt, zz, zt[start:start + 1], zz[start:start + 1])[:, 0]  # (N,) to nearest centre
    centers = [start]
    bar = progress_bar(total=n, initial=1, desc="coreset", unit="pt", leave=False,
               disable=None if progress is None else not progress)
    while len(centers) < n:
        t = min(candidates, N - 1)
        top = torch.topk(mind, t + 1)                                # candidates + the runner-up bound
        cand, cm = top.indices[:t], top.values[:t].clone()           # (T,), (T,)
        tau = top.values[t]
        zc, zzc = zt[cand], zz[cand]                                 # (T, k), (T,)
        new: list[int] = []
        while len(centers) + len(new) < n:
            i = int(torch.argmax(cm))
            if cm[i] < tau or cm[i] <= 0:                            # a non-candidate may be farther now
                break
            new.append(int(cand[i]))
            torch.minimum(cm, _sqdist(zc, zzc, zc[i:i + 1], zzc[i:i + 1])[:, 0], out=cm)
            cm[i] = 0                                                # exactly: float32 |a|^2 + |b|^2 - 2ab is not
        if not new:                                                  # every candidate coincides with a centre
            break
        idx = torch.tensor(new)
        c2, cc = -2.0 * zt[idx].T, zz[idx]                           # (k, B), (B,)
        step = max(256, (1 << 20) // len(new))                       # keep each (rows, B) block in cache
        for r in range(0, N, step):                                  # one compute-bound pass per round
            d = torch.addmm(cc[None, :], zt[r:r + step], c2).amin(1)  # (rows,) = min_b |c_b|^2 - 2 z.c_b
            torch.minimum(mind[r:r + step], (d + zz[r:r + step]).clamp_(min=0), out=mind[r:r + step])
        mind[idx] = 0                                                # a centre is never picked twice
        centers += new
        bar.update(len(new))
    bar.close()
    return np.array(centers, np.int64)


def greedy_kcenter_reference(z: np.ndarray, n: int, start: int = 0) -> np.ndarray:
    """The textbook loop, one pass over all points per centre (float64), for tests."""
    z = np.asarray(z, np.float64)
    centers = [start]
    mind = ((z - z[start]) ** 2).sum(1)
    for _ in range(1, min(n, len(z))):
        j = int(np.argmax(mind))
        centers.append(j)
        mind = np.minimum(mind, ((z - z[j]) ** 2).sum(1))
    return np.array(centers, np.int64)


def coreset_size(n_total: int, ratio: float, knee: int | None = None) -> int:
    """Bank entries chosen from n_total rows: ceil(ratio * N); with `knee`, past knee rows ceil(ratio * sqrt(knee * N))
    (as many as at N = knee, then growing as the square root of N). Raises ValueError for a ratio outside (0, 1]."""
    if not 0 < ratio <= 1:
        raise ValueError(f"coreset ratio must be in (0, 1], got {ratio}")
    rows = n_total if knee is None or n_total <= knee else math.sqrt(knee * n_total)
    return max(1, math.ceil(ratio * rows))


def greedy_coreset(x: np.ndarray, ratio: float = 0.1, *, proj_dim: int | None = 128, seed: int = 0,
                   n: int | None = None, knee: int | None = None, cover: float | None = None,
                   progress: bool | None = False) -> np.ndarray:
    """Indices (n,) of a k-center coreset of x (N, D); n = coreset_size(N, ratio, knee) unless given.

    cover None: the centres cover every row (exact greedy k-center). Else they are chosen among, and to cover, a
    seeded random sample of min(N, ceil(cover * n)) rows."""
    n = coreset_size(len(x), ratio, knee) if n is None else n
    if n >= len(x):
        return np.arange(len(x))
    rng = np.random.default_rng(seed)
    start = int(rng.integers(len(x)))
    if cover is None or math.ceil(cover * n) >= len(x):
        return greedy_kcenter(random_projection(x, proj_dim, seed), n, start, progress=progress)
    rows = np.sort(rng.choice(len(x), math.ceil(cover * n), replace=False))     # (m,) the rows to cover
    z = random_projection(x[rows], proj_dim, seed)                               # (m, k)
    return rows[greedy_kcenter(z, n, start % len(rows), progress=progress)]


def chunked_coreset(chunks: Iterable[np.ndarray], ratio: float = 0.1, *, proj_dim: int | None = 128,
                    seed: int = 0, oversample: float = 2.0, knee: int | None = None, cover: float | None = None,
                    progress: bool | None = False) -> np.ndarray:
    """Coreset rows (n, D) of data seen chunk by chunk: each chunk (N_i, D) is reduced to an
    oversampled coreset (oversample * ratio of it), then the union is reduced to coreset_size(sum N_i, ratio, knee)
    rows (`greedy_coreset` with `cover`).

    Peak memory is one chunk plus the kept rows.
    """
    kept, total = [], 0
    for i, chunk in enumerate(chunks):
        chunk = np.asarray(chunk, np.float32)
        total += len(chunk)
        idx = greedy_coreset(chunk, min(1.0, ratio * oversample), proj_dim=proj_dim, seed=seed + i, progress=progress)
        kept.append(chunk[idx])
    if not kept:
        raise ValueError("no features to build a coreset from")
    union = np.concatenate(kept)                                     # (sum n_i, D)
    n = min(len(union), coreset_size(total, ratio, knee))
    return union[greedy_coreset(union, n=n, proj_dim=proj_dim, seed=seed, cover=cover, progress=progress)]


def coreset_bank(pieces: Iterable[np.ndarray], ratio: float = 0.1, *, proj_dim: int | None = 128, seed: int = 0,
                 chunk: int | None = None, knee: int | None = None, cover: float | None = None,
                 progress: bool | None = False) -> tuple[np.ndarray, int]:
    """The memory bank: a k-center coreset (M, D) float32, C-contiguous, of feature rows arriving in pieces
    (N_i, D), and the number of rows N = sum N_i it was chosen from. M = coreset_size(N, ratio, knee); `cover`
    as in `greedy_coreset` (None, with knee None: the exact selection of ceil(ratio * N)).

    chunk None: all rows at once (`greedy_coreset`); else the pieces are gathered into chunks of at least `chunk`
    rows and reduced chunk by chunk (`chunked_coreset`), so all rows never sit in memory at once.
    """
    n_rows = 0

    def counted() -> Iterator[np.ndarray]:
        nonlocal n_rows
        for r in pieces:
            n_rows += len(r)
            yield r

    if chunk:
        def chunks() -> Iterator[np.ndarray]:
            buf, n = [], 0
            for r in counted():
                buf.append(r)
                n += len(r)
                if n >= chunk:
                    yield np.concatenate(buf)
                    buf, n = [], 0
            if buf:
                yield np.concatenate(buf)
        bank = chunked_coreset(chunks(), ratio, proj_dim=proj_dim, seed=seed, knee=knee, cover=cover,
                               progress=progress)
    else:
        x = np.concatenate(list(counted()))                          # (N, D)
        bank = x[greedy_coreset(x, ratio, proj_dim=proj_dim, seed=seed, knee=knee, cover=cover, progress=progress)]
    return np.ascontiguousarray(bank, np.float32), n_rows
