"""benchmarks/control_failure_geometry.py on a tiny run: the split of configurations and the distances."""
import json

import numpy as np
import pytest

from frozenvit.control import MetaWorldTask, RenderUnavailable, collect_demos, config_seeds
from frozenvit.control.demos import load_manifest


def test_failed_and_solved_configurations_are_compared_on_their_distance_to_the_demos(tmp_path, load_benchmark):
    fg = load_benchmark("control_failure_geometry")
    try:
        demos = collect_demos("reach-v3", tmp_path / "demos", 2, image_size=32, max_steps=100, hold_steps=0,
                              progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    held = config_seeds("heldout", 4)
    per_seed = [[True, True, False, False], [True, False, False, True]]      # solved by >= half: configs 0, 1, 3
    run = dict(settings=dict(heldout_seeds=[held[0], held[-1]]),
               results=[dict(task="reach-v3", pooling="attention", seed=s, per_config=pc) for s, pc in enumerate(per_seed)]
               + [dict(task="reach-v3", pooling="cls", seed=0, per_config=[False] * 4)])
    (tmp_path / "run.json").write_text(json.dumps(run))
    out = fg.analyse(str(tmp_path / "run.json"), "reach-v3", str(demos))
    assert (out["heads"], out["configs"], out["solved"]) == (2, 4, 3)
    with MetaWorldTask("reach-v3", render=None, max_steps=10) as env:
        train = np.array([env.reset(e["config"]).full[-3:] for e in load_manifest(demos)["episodes"]])
        test = np.array([env.reset(c).full[-3:] for c in held])
    nearest = [100 * min(np.linalg.norm(g - t) for t in train) for g in test]
    got = out["goal: nearest demo goal (cm)"]
    assert got["solved"] == pytest.approx(np.mean([nearest[0], nearest[1], nearest[3]]))
    assert got["failed"] == pytest.approx(nearest[2])
    with pytest.raises(SystemExit, match="no mean heads"):
        fg.analyse(str(tmp_path / "run.json"), "reach-v3", str(demos), pooling="mean")
