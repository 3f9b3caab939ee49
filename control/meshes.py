"""Level-of-detail meshes for the simulated camera: fewer triangles, same scene, same physics.

Mesa's CPU rasteriser spends most of a Meta-World frame transforming and lighting the Sawyer
arm's ~68k mesh triangles, although at 112-224 px the whole arm covers a few thousand pixels.
`render_model(model, max_faces)` returns a copy of a compiled MuJoCo model whose meshes above
`MIN_GAIN * max_faces` triangles are simplified to ~`max_faces` by quadric edge collapse (the `fast-simplification`
package); a renderer made from the copy draws the same `MjData` as the original model. The
physics never sees the copy: collisions, inertia and contacts stay those of the full meshes.

Simplified vertices stay in the mesh's own frame (the compiled model has already centred it),
so geom poses computed by the original model place them correctly. Normals are recomputed
(area-weighted, smooth); texture coordinates are taken from the nearest original vertex.
"""
from __future__ import annotations

import copy
import hashlib
from typing import Any

import numpy as np

MIN_GAIN = 3       # only meshes with more than MIN_GAIN * max_faces triangles are simplified

_CACHE: dict[tuple[str, int], dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]] = {}


def _simplify(model: Any, max_faces: int) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
    """{mesh id: (vertices, faces, normals, texcoords or None)} for the meshes above max_faces."""
    import fast_simplification
    from scipy.spatial import cKDTree

    out = {}
    for mid in range(model.nmesh):
        nf = int(model.mesh_facenum[mid])
        if nf <= MIN_GAIN * max_faces:
            continue                    # little to gain, and thin parts (the pedestal's column) collapse
        va, nv = int(model.mesh_vertadr[mid]), int(model.mesh_vertnum[mid])
        fa = int(model.mesh_faceadr[mid])
        V = np.asarray(model.mesh_vert[va:va + nv], dtype=np.float64)
        F = np.asarray(model.mesh_face[fa:fa + nf], dtype=np.int64)
        P, G = fast_simplification.simplify(V, F, target_count=int(max_faces))
        P, G = np.asarray(P, dtype=np.float32), np.asarray(G, dtype=np.int32)
        if len(G) == 0 or len(G) >= nf or len(P) > min(nv, int(model.mesh_normalnum[mid])):
            continue                                    # nothing gained, or it would not fit in place
        face_n = np.cross(P[G[:, 1]] - P[G[:, 0]], P[G[:, 2]] - P[G[:, 0]])      # area-weighted
        N = np.zeros_like(P)
        for k in range(3):
            np.add.at(N, G[:, k], face_n)
        N /= np.maximum(np.linalg.norm(N, axis=1, keepdims=True), 1e-12)
        T = None
        nt = int(model.mesh_texcoordnum[mid])
        if nt > 0:
            if len(P) > nt:
                continue
            # texcoords belong to face corners: take each original vertex's first corner's texcoord
            ft = np.asarray(model.mesh_facetexcoord[fa:fa + nf], dtype=np.int64)
            ta = int(model.mesh_texcoordadr[mid])
            per_vertex = np.zeros((nv, 2), dtype=np.float32)
            per_vertex[F.ravel()] = model.mesh_texcoord[ta + ft.ravel()]
            T = per_vertex[cKDTree(V).query(P.astype(np.float64))[1]]
        out[mid] = (P, G, N, T)
    return out


def render_model(model: Any, max_faces: int) -> Any:
    """A copy of `model` whose meshes above MIN_GAIN * max_faces triangles have ~max_faces (rendering only).

    Simplification runs once per distinct mesh set and cap in a process; copies are cheap.
    """
    if int(max_faces) < 4:
        raise ValueError(f"max_faces must be >= 4, got {max_faces}")
    h = hashlib.sha1()
    for a in (model.mesh_vertnum, model.mesh_facenum, model.mesh_vert, model.mesh_face):
        h.update(np.ascontiguousarray(a).tobytes())
    key = (h.hexdigest(), int(max_faces))
    if key not in _CACHE:
        _CACHE[key] = _simplify(model, int(max_faces))
    rm = copy.deepcopy(model)
    for mid, (P, G, N, T) in _CACHE[key].items():
        va, fa, na = int(rm.mesh_vertadr[mid]), int(rm.mesh_faceadr[mid]), int(rm.mesh_normaladr[mid])
        rm.mesh_vert[va:va + len(P)] = P
        rm.mesh_vertnum[mid] = len(P)
        rm.mesh_normal[na:na + len(P)] = N
        rm.mesh_normalnum[mid] = len(P)
        rm.mesh_face[fa:fa + len(G)] = G
        rm.mesh_facenormal[fa:fa + len(G)] = G
        rm.mesh_facenum[mid] = len(G)
        if T is not None:
            ta = int(rm.mesh_texcoordadr[mid])
            rm.mesh_texcoord[ta:ta + len(P)] = T
            rm.mesh_texcoordnum[mid] = len(P)
            rm.mesh_facetexcoord[fa:fa + len(G)] = G
    return rm


def face_counts(model: Any) -> tuple[int, int]:
    """(meshes, triangles) in a model."""
    return int(model.nmesh), int(np.sum(model.mesh_facenum))
