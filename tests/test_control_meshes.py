"""Level-of-detail render models: fewer triangles, same frame (nearly), same physics, originals untouched."""
import hashlib

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("fast_simplification")

from frozenvit.control.env import RenderSettings  # noqa: E402
from frozenvit.control.meshes import MIN_GAIN, face_counts, render_model  # noqa: E402


def _sphere_xml(n_lat: int = 40, n_lon: int = 60, texcoord: bool = True) -> str:
    """A UV sphere of radius 0.1 as an explicit MuJoCo mesh (with texture coordinates)."""
    verts, uv = [], []
    for i in range(n_lat + 1):
        th = np.pi * i / n_lat
        for j in range(n_lon):
            ph = 2 * np.pi * j / n_lon
            verts.append([0.1 * np.sin(th) * np.cos(ph), 0.1 * np.sin(th) * np.sin(ph), 0.1 * np.cos(th)])
            uv.append([j / n_lon, i / n_lat])
    faces = []
    for i in range(n_lat):
        for j in range(n_lon):
            a, b = i * n_lon + j, i * n_lon + (j + 1) % n_lon
            c, d = a + n_lon, b + n_lon
            if i > 0:
                faces.append([a, d, b])
            if i < n_lat - 1:
                faces.append([a, c, d])
    fmt = lambda a: " ".join(f"{x:.6g}" for x in np.ravel(a))  # noqa: E731
    tc = f' texcoord="{fmt(uv)}"' if texcoord else ""
    return f"""<mujoco><asset><mesh name="ball" vertex="{fmt(verts)}" face="{fmt(faces)}"{tc}/></asset>
      <worldbody><body><freejoint/><geom type="mesh" mesh="ball"/></body>
      <geom name="small" type="box" size=".05 .05 .05" pos=".5 0 0"/></worldbody></mujoco>"""


def _digest(m) -> str:
    h = hashlib.sha1()
    for a in (m.mesh_vert, m.mesh_face, m.mesh_normal, m.mesh_facenum, m.mesh_vertnum, m.mesh_texcoord):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_render_model_simplifies_big_meshes_in_their_own_frame_and_leaves_the_original_alone():
    m = mujoco.MjModel.from_xml_string(_sphere_xml())
    before, (_, faces0) = _digest(m), face_counts(m)
    assert faces0 > MIN_GAIN * 200
    rm = render_model(m, 200)
    assert _digest(m) == before                                   # the physics model is untouched
    nf, nv = int(rm.mesh_facenum[0]), int(rm.mesh_vertnum[0])
    assert nf <= 220 < faces0
    V = rm.mesh_vert[rm.mesh_vertadr[0]:rm.mesh_vertadr[0] + nv]
    F = rm.mesh_face[rm.mesh_faceadr[0]:rm.mesh_faceadr[0] + nf]
    assert F.min() >= 0 and F.max() < nv
    r = np.linalg.norm(V, axis=1)                                 # still the same sphere, same centre
    assert np.all(np.abs(r - 0.1) < 0.005) and abs(r.mean() - 0.1) < 0.003
    N = rm.mesh_normal[rm.mesh_normaladr[0]:rm.mesh_normaladr[0] + nv]
    assert np.allclose(np.linalg.norm(N, axis=1), 1, atol=1e-4)
    assert np.mean(np.sum(N * V / r[:, None], axis=1)) > 0.95     # smooth normals point outwards
    T = rm.mesh_texcoord[rm.mesh_texcoordadr[0]:rm.mesh_texcoordadr[0] + int(rm.mesh_texcoordnum[0])]
    assert int(rm.mesh_texcoordnum[0]) == nv and T.min() >= 0 and T.max() <= 1
    # small meshes are left as they are: little to gain
    assert int(render_model(m, faces0 // 2).mesh_facenum[0]) == faces0


def test_render_settings_validate_and_round_trip():
    with pytest.raises(ValueError, match="mesh_faces"):
        RenderSettings(mesh_faces=2)
    for s in (RenderSettings(), RenderSettings.metaworld(), RenderSettings.simplified()):
        assert RenderSettings.from_dict(s.as_dict()) == s
    assert RenderSettings.metaworld().mesh_faces is None and RenderSettings().mesh_faces is None
    assert RenderSettings.simplified().mesh_faces == 800


@pytest.mark.slow
def test_metaworld_frames_with_simplified_meshes_match_full_meshes_and_physics_is_the_same():
    pytest.importorskip("metaworld")
    from frozenvit.control import MetaWorldTask, RenderUnavailable

    try:
        full = MetaWorldTask("reach-v3", image_size=96, max_steps=20, render=RenderSettings(mesh_faces=None))
        lod = MetaWorldTask("reach-v3", image_size=96, max_steps=20, render=RenderSettings.simplified())
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    with full, lod:
        assert face_counts(lod._renderer._renderer.model)[1] * 3 < face_counts(full.env.model)[1]
        for t in (full, lod):
            t.reset(1_000_003)
        rng = np.random.default_rng(0)
        for _ in range(8):
            a = rng.uniform(-1, 1, 4)
            s_full, s_lod = full.step(a), lod.step(a)
            assert np.array_equal(s_full.full, s_lod.full)              # the physics never sees the copy
        f_full, f_lod = full.render().astype(float), lod.render().astype(float)
        psnr = 10 * np.log10(255.0 ** 2 / np.mean((f_full - f_lod) ** 2))
        assert 25.0 < psnr < 80.0          # close to the full-mesh frame, yet really drawn from other meshes


def test_mesh_faces_option_parses_counts_none_and_stored_settings():
    import argparse

    from frozenvit.backbone.suite.errors import UsageError
    from frozenvit.control.cli import parse_mesh_faces, render_settings

    ns = lambda v: argparse.Namespace(mesh_faces=v)  # noqa: E731
    assert render_settings(ns("800")).mesh_faces == 800 and render_settings(ns("none")).mesh_faces is None
    assert render_settings(ns(None), RenderSettings.simplified().as_dict()) == RenderSettings.simplified()
    assert render_settings(ns(None)) == RenderSettings()
    for bad, msg in (("abc", "triangle count"), ("2", ">= 4")):
        with pytest.raises(UsageError, match=msg):
            render_settings(ns(bad))
    assert parse_mesh_faces("800") == RenderSettings.simplified() and parse_mesh_faces("None") == RenderSettings()
