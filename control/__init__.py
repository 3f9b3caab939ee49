"""frozenvit.control: a patch-token visuomotor policy on Meta-World.

    from control import MetaWorldTask, collect_demos, cache_features, PatchTokenPolicy, evaluate, measure_latency
    collect_demos("reach-v3", "runs/demos/reach", n_episodes=25)            # scripted expert, successes only
    cache = cache_features("runs/demos/reach", bb)                          # frozen encoder once per frame
    pol = PatchTokenPolicy(pooling="attention").fit(cache)                  # behaviour cloning (MSE)
    res = evaluate(pol, bb, config_seeds("heldout", 50))                    # success on unseen configurations
    rep = measure_latency(VisuomotorAgent(pol, bb), MetaWorldTask("reach-v3"))  # p50/p95/p99 + stages

Meta-World, MuJoCo and gymnasium are the `control` extra: pip install 'frozenvit[control]'.
"""
from .agent import StageTimer, VisuomotorAgent
from .demos import Episode, collect_demos, iter_episodes, load_manifest, read_episode, record_episode
from .env import (ACTION_DIM, DEFAULT_CAMERA, HELDOUT_OFFSET, PROPRIO_DIM, FrameRenderer, MetaWorldTask,
                  RenderSettings, State, camera_is_upside_down, config_seeds, task_names)
from .errors import DemoError, RenderUnavailable, TaskError
from .evaluate import TaskResult, evaluate, save_gif
from .features import FeatureCache, backbone_meta, cache_features, load_feature_cache
from .head import POOLINGS, AttentionPool, PolicyHead, bc_loss
from .latency import STAGES, LatencyReport, measure_latency
from .policy import PatchTokenPolicy

__all__ = [
    "MetaWorldTask", "RenderSettings", "FrameRenderer", "State", "camera_is_upside_down", "config_seeds",
    "task_names", "HELDOUT_OFFSET", "PROPRIO_DIM", "ACTION_DIM", "DEFAULT_CAMERA",
    "collect_demos", "record_episode", "iter_episodes", "read_episode", "load_manifest", "Episode",
    "cache_features", "load_feature_cache", "FeatureCache", "backbone_meta",
    "AttentionPool", "PolicyHead", "POOLINGS", "bc_loss", "PatchTokenPolicy",
    "VisuomotorAgent", "StageTimer", "evaluate", "TaskResult", "save_gif",
    "measure_latency", "LatencyReport", "STAGES",
    "TaskError", "RenderUnavailable", "DemoError",
]
