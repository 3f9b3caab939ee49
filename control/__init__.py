"""frozenvit.control: a patch-token visuomotor policy on Meta-World.

    from frozenvit.control import (MetaWorldTask, collect_demos, cache_features, AttentionConfig, PatchTokenPolicy,
                                   evaluate, measure_latency, VisuomotorAgent, config_seeds, load_encoder)
    bb = load_encoder()                           # the embedded ViT; or load_encoder("metaworld-fast"), a timm name
    collect_demos("reach-v3", "runs/demos/reach", n_episodes=25)            # scripted expert, successes only
    cache = cache_features("runs/demos/reach", bb)                          # frozen encoder once per frame
    pol = PatchTokenPolicy("attention", AttentionConfig(queries=4)).fit(cache)  # behaviour cloning (MSE)
    res = evaluate(pol, bb, config_seeds("heldout", 50))                    # success on unseen configurations
    rep = measure_latency(VisuomotorAgent(pol, bb), MetaWorldTask("reach-v3"))  # p50/p95/p99 + stages

Meta-World, MuJoCo and gymnasium are the `control` extra: pip install 'frozenvit[control]'.
Names are imported on first use (PEP 562): `frozenvit --help` does not load torch or MuJoCo.
"""
from __future__ import annotations

from frozenvit.backbone.suite.lazy import lazy_exports

_API = {
    "agent": ("StageTimer", "TemporalEnsemble", "VisuomotorAgent"),
    "compare": ("McNemar", "RunMismatch", "compare_evaluations", "compare_runs", "mcnemar", "merge_runs"),
    "defaults": ("DEFAULT_CAMERA",),
    "demos": ("Episode", "collect_demos", "iter_episodes", "load_manifest", "read_episode", "record_episode"),
    "encoders": ("BACKBONES", "FAST_ENCODER", "encoder_for_policy", "load_encoder", "load_fast_encoder"),
    "env": ("ACTION_DIM", "HELDOUT_OFFSET", "PROPRIO_DIM", "MetaWorldTask", "State", "check_camera", "check_task",
            "config_seeds",
            "task_names"),
    "errors": ("DemoError", "PolicyError", "RenderUnavailable", "TaskError"),
    "evaluate": ("EpisodeJournal", "TaskResult", "evaluate", "release_workers", "save_gif"),
    "experts": ("DEMONSTRATORS", "EXPERTS", "TASK_DEMONSTRATORS", "GoalServo", "MetaWorldExpert", "expert_name",
                "make_expert"),
    "features": ("FeatureCache", "backbone_meta", "cache_features", "default_blocks", "load_feature_cache",
                 "native_bfloat16"),
    "head": ("POOLINGS", "AttentionConfig", "AttentionPool", "HeadConfig", "PolicyHead", "bc_loss"),
    "latency": ("STAGES", "LatencyReport", "UntrainedHead", "measure_latency"),
    "policy": ("PatchTokenPolicy", "bc_epochs"),
    "render": ("FrameRenderer", "RenderSettings", "camera_is_upside_down"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _API, globals())
