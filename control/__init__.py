"""frozenvit.control: a patch-token visuomotor policy on Meta-World.

    from frozenvit.control import MetaWorldTask, collect_demos, cache_features, PatchTokenPolicy, evaluate, measure_latency
    collect_demos("reach-v3", "runs/demos/reach", n_episodes=25)            # scripted expert, successes only
    cache = cache_features("runs/demos/reach", bb)                          # frozen encoder once per frame
    pol = PatchTokenPolicy(pooling="attention").fit(cache)                  # behaviour cloning (MSE)
    res = evaluate(pol, bb, config_seeds("heldout", 50))                    # success on unseen configurations
    rep = measure_latency(VisuomotorAgent(pol, bb), MetaWorldTask("reach-v3"))  # p50/p95/p99 + stages

Meta-World, MuJoCo and gymnasium are the `control` extra: pip install 'frozenvit[control]'.
Names are imported on first use (PEP 562): `frozenvit --help` does not load torch or MuJoCo.
"""
from __future__ import annotations

from frozenvit.backbone.suite.lazy import lazy_exports

_API = {
    "agent": ("StageTimer", "VisuomotorAgent"),
    "encoders": ("FAST_ENCODER", "load_fast_encoder"),
    "demos": ("Episode", "collect_demos", "iter_episodes", "load_manifest", "read_episode", "record_episode"),
    "env": ("ACTION_DIM", "DEFAULT_CAMERA", "HELDOUT_OFFSET", "PROPRIO_DIM", "FrameRenderer", "MetaWorldTask",
            "RenderSettings", "State", "camera_is_upside_down", "config_seeds", "task_names"),
    "errors": ("DemoError", "RenderUnavailable", "TaskError"),
    "evaluate": ("TaskResult", "evaluate", "save_gif"),
    "features": ("FeatureCache", "backbone_meta", "cache_features", "default_block", "load_feature_cache"),
    "head": ("POOLINGS", "AttentionPool", "PolicyHead", "bc_loss"),
    "latency": ("STAGES", "LatencyReport", "measure_latency"),
    "policy": ("PatchTokenPolicy", "PolicyEnsemble", "load_policy"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _API, globals())
