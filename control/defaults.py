"""Defaults the CLI shows without importing torch (`frozenvit --help` stays light).

Why these values: control/RESULTS.md ("Queries kept apart", "Trained to convergence", "Held demos on the
test set", "Augmented views").
"""
POOLINGS = ("attention", "cls", "mean")
DEFAULT_QUERIES = 4
DEFAULT_HEADS = 4
DEFAULT_QUERY_DIVERSITY = 0.02    # weight of the penalty on queries whose attention maps overlap
DEFAULT_HIDDEN = 256              # width of the MLP's two hidden layers
DEFAULT_BC_EPOCHS = 200
DEFAULT_BATCH_SIZE = 256
DEFAULT_LR = 1e-3
DEFAULT_HOLD_STEPS = 20           # expert steps recorded past its first success (RESULTS.md, "Held demos")
DEFAULT_CHUNK = 8                 # actions predicted per frame (ACT chunks; 1: none; RESULTS.md, "Action chunks the default")
DEFAULT_CHUNK_DECAY = 0.1         # temporal ensemble weights exp(-m i), i = 0 for the oldest (RESULTS.md, "The ensemble's decay")
DEFAULT_VIEWS = 4                 # augmented views per demo frame, encoded once (RESULTS.md, "Augmented views")
