"""Meta-World tasks: seeded configurations, disjoint splits, upright frames, a real env rendered and stepped."""
import numpy as np
import pytest

from frozenvit.control.env import HELDOUT_OFFSET, config_seeds
from frozenvit.control.render import camera_is_upside_down

metaworld = pytest.importorskip("metaworld")
mujoco = pytest.importorskip("mujoco")

from frozenvit.control import FrameRenderer, MetaWorldTask, RenderUnavailable, TaskError  # noqa: E402


def test_training_and_heldout_configuration_seeds_are_disjoint():
    train, held = config_seeds("train", 500), config_seeds("heldout", 500)
    assert len(set(train)) == 500 and not set(train) & set(held)
    assert max(train) < HELDOUT_OFFSET <= min(held)
    with pytest.raises(ValueError, match="below"):
        config_seeds("train", 10, start=HELDOUT_OFFSET - 5)


def test_camera_is_upside_down_when_its_up_axis_points_below_the_horizon():
    upright = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], float)     # columns: x, y(up)=+z world, z
    rolled = upright @ np.diag([-1, -1, 1])                               # same view, rolled 180 degrees
    looking_down = np.eye(3)                                              # top view: up axis horizontal
    assert not camera_is_upside_down(upright)
    assert camera_is_upside_down(rolled)
    assert not camera_is_upside_down(looking_down)


KNOWN_SCENE = """
<mujoco>
  <worldbody>
    <light pos="0 -1 3" dir="0 0.3 -1" directional="true"/>
    <geom type="plane" size="3 3 .1" rgba=".5 .5 .5 1"/>
    <geom name="low" type="box" pos="0 0 0.15" size=".15 .15 .15" rgba="0 0 1 1"/>
    <geom name="high" type="sphere" pos="0 0 0.75" size=".12" rgba="1 0 0 1"/>
    <geom name="right" type="sphere" pos="0.45 0 0.45" size=".1" rgba="0 1 0 1"/>
    <camera name="upright" pos="0 -2.5 0.45" xyaxes="1 0 0 0 0 1"/>
    <camera name="rolled" pos="0 -2.5 0.45" xyaxes="-1 0 0 0 0 -1"/>
  </worldbody>
</mujoco>
"""


def _centroid(img, channel):
    others = [c for c in range(3) if c != channel]
    mask = (img[..., channel] > 100) & (img[..., others[0]] < 60) & (img[..., others[1]] < 60)
    assert mask.sum() > 5, f"colour {channel} not visible"
    ys, xs = np.nonzero(mask)
    return ys.mean(), xs.mean()


def _renderer(model, data, camera):
    try:
        return FrameRenderer(model, data, camera, 64)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")


@pytest.mark.slow
@pytest.mark.parametrize("camera", ["upright", "rolled"])
def test_frames_are_upright_on_a_known_scene_for_normal_and_rolled_cameras(camera):
    model = mujoco.MjModel.from_xml_string(KNOWN_SCENE)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    r = _renderer(model, data, camera)
    try:
        img, raw = r.render(), r.render(upright=False)
    finally:
        r.close()
    red, blue, green = _centroid(img, 0), _centroid(img, 2), _centroid(img, 1)
    assert red[0] < blue[0], "the high red sphere must be above the low blue box"
    assert green[1] > blue[1], "world +x (the green sphere) must be on the right, not mirrored"
    if camera == "rolled":                                # the correction is what makes it upright
        assert _centroid(raw, 0)[0] > _centroid(raw, 2)[0]


def test_same_configuration_seed_gives_the_same_scene_and_other_seeds_differ():
    a, b = MetaWorldTask("push-v3", render=None), MetaWorldTask("push-v3", render=None)
    try:
        a.reset(7)
        b.reset(3)
        b.reset(7)
        np.testing.assert_array_equal(a.config_vector(), b.config_vector())
        np.testing.assert_array_equal(a.reset(7).full, b.reset(7).full)
        a.reset(8)
        assert not np.allclose(a.config_vector(), b.config_vector())
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("task", ["reach-v3", "push-v3"])
def test_the_goal_is_drawn_where_it_is_right_after_a_reset(task):
    # Meta-World sets the goal site after the reset's last forward pass; the renderer draws data.site_xpos,
    # so without a fresh forward pass the first frame of every episode showed the goal somewhere else.
    with MetaWorldTask(task, render=None) as t:
        site = mujoco.mj_name2id(t.env.model, mujoco.mjtObj.mjOBJ_SITE, "goal")
        for config in (0, 1, 2):
            s = t.reset(config)
            np.testing.assert_allclose(t.env.data.site_xpos[site], s.full[36:39], atol=1e-9)
            np.testing.assert_allclose(t.env.data.site_xpos[site], t.env._target_pos, atol=1e-9)


def test_region_split_keeps_configurations_on_the_asked_side():
    with MetaWorldTask("reach-v3", render=None) as t:
        left = t.configs("heldout", 3, region="left")
        xs = []
        for c in left:
            t.reset(c)
            xs.append(t.config_vector()[0])
    assert all(c >= HELDOUT_OFFSET for c in left) and all(x < 0 for x in xs)


def test_scripted_expert_solves_reach_and_the_episode_ends_on_success():
    with MetaWorldTask("reach-v3", render=None, max_steps=200) as t:
        s = t.reset(config_seeds("heldout", 1)[0])
        while not s.done:
            s = t.step(t.expert_action())
        assert s.success and s.steps < 200
        with pytest.raises(TaskError, match="reset"):
            t.step(np.zeros(4))


def test_episode_is_capped_at_max_steps():
    with MetaWorldTask("reach-v3", render=None, max_steps=5) as t:
        s = t.reset(0)
        for _ in range(5):
            s = t.step(np.zeros(4))
        assert s.done and not s.success and s.steps == 5


def test_unknown_task_name_raises_task_error_with_suggestions():
    with pytest.raises(TaskError, match="reach-v3"):
        MetaWorldTask("reach-v2", render=None)


@pytest.mark.slow
def test_real_metaworld_env_renders_an_upright_frame_and_steps():
    try:
        t = MetaWorldTask("reach-v3", camera="corner", image_size=64, max_steps=20)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    with t:
        assert camera_is_upside_down(t.env.data.cam_xmat[t._renderer.cam_id])   # Meta-World's corner camera is
        s0 = t.reset(0)                                                          # rolled over: we correct it
        f0 = t.render()
        assert f0.shape == (64, 64, 3) and f0.dtype == np.uint8 and f0.std() > 5
        for _ in range(5):
            s = t.step(np.array([0.0, 0.0, 1.0, 0.0]))                           # hand up
        f1 = t.render()
        assert s.proprio[2] > s0.proprio[2] + 0.005
        assert np.abs(f1.astype(int) - f0.astype(int)).mean() > 0.5             # the scene moved in the frame
