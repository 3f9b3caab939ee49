"""Defaults of the library, which the CLI shows without importing torch (`frozenvit --help` stays light).

Why these values: lab/control-results.md ("Queries kept apart", "Trained to convergence", "Held demos on the
test set", "Augmented views", "Action chunks the default").
"""
POOLINGS = ("attention", "cls", "mean")
PRECISIONS = ("auto", "bfloat16", "float32")   # of the encoder while caching demo features
DEFAULT_QUERIES = 4
DEFAULT_HEADS = 4
DEFAULT_QUERY_DIVERSITY = 0.02    # weight of the penalty on queries whose attention maps overlap
DEFAULT_HIDDEN = 256              # width of the MLP's two hidden layers
DEFAULT_BC_STEPS = 1500           # optimizer steps of behaviour cloning (epochs: as many as make them)
DEFAULT_BATCH_SIZE = 256
DEFAULT_CHECKPOINT_EVERY = 10       # epochs between training checkpoints (Ctrl-C also saves the last epoch)
DEFAULT_LR = 1e-3
DEFAULT_HOLD_STEPS = 20           # expert steps recorded past its first success
DEFAULT_CHUNK = 8                 # actions predicted per frame (ACT chunks; 1: none)
DEFAULT_CHUNK_DECAY = 0.1         # temporal ensemble weights exp(-m i), i = 0 for the oldest prediction
DEFAULT_VIEWS = 4                 # augmented views per demo frame, encoded once
DEFAULT_VIEW_SHIFT = 4            # a view's random shift, pixels of the encoder's input
DEFAULT_VIEW_JITTER = 0.1         # a view's colour factors are drawn from [1 - jitter, 1 + jitter]
DEFAULT_PRECISION = "auto"        # bfloat16 where the CPU multiplies it natively, else float32

DEFAULT_CAMERA = "corner"
HELDOUT_OFFSET = 1_000_000        # held-out configuration seeds start here; training seeds are 0 .. HELDOUT_OFFSET - 1
MIN_IMAGE_SIZE = 16               # --image-size range of every control command, in pixels: one 16-px patch at least,
MAX_IMAGE_SIZE = 1024             # and at most 64 x 64 such patches (4096 tokens a frame, 4.7 MB of cached features
                                  # at the default blocks), past which demo frames and their features outgrow memory
DEFAULT_EXPERT = "default"        # each task's default demonstrator (control.experts)
DEFAULT_EPISODES = 25             # successful demos recorded by `control collect`
DEFAULT_MAX_STEPS = 500           # episode cap (Meta-World's own)
DEFAULT_CONFIGS = 50              # held-out configurations of `control evaluate`
DEFAULT_PARALLEL = 4              # environments stepped in lockstep by `evaluate`
LATENCY_TASK = "reach-v3"
LATENCY_STEPS = 200               # timed steps of `measure_latency`
LATENCY_WARMUP = 20               # untimed steps first
DEFAULT_POOLING = "attention"
# upper bounds of the sizes a user gives (none of them limits a real use; each keeps an allocation that cannot fit
# in memory from starting): `control train`'s and PatchTokenPolicy's, then `control evaluate`'s and config_seeds'
MAX_HIDDEN = 8192                 # MLP width: 8192^2 weights are 256 MiB already
MAX_QUERIES = 256                 # attention pooling's learned queries
MAX_CHUNK = DEFAULT_MAX_STEPS     # actions per frame: past an episode's cap every chunk only repeats the last action
MAX_BATCH_SIZE = 16384            # frames per optimizer step (16384 frames of 196 576-d tokens: 3.5 GiB a batch)
MAX_VIEWS = 64                    # augmented views per demo frame (each costs the clean features' memory again)
MAX_CONFIGS = 100_000             # configurations of one evaluation (at 500 steps each: weeks of rollouts)
MAX_PARALLEL = 256                # environments stepped together (each holds a MuJoCo scene and a renderer)
DEFAULT_SEED = 0
