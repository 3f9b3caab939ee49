"""Defaults of the attention head that the CLI needs without importing torch (`frozenvit --help` stays light).

The attention head's defaults since the held-out test in control/RESULTS.md ("Queries kept apart"):
a fixed 2-d sine-cosine position code with orthogonal queries, and a penalty of weight 0.02 on
queries whose attention maps overlap. Policies saved before these options existed load as
"learned" / 0.0, which is what they were trained with.
"""
POS_CODES = ("learned", "sincos")
DEFAULT_POS_CODE = "sincos"
DEFAULT_QUERY_DIVERSITY = 0.02
# behaviour-cloning epochs of every head (200 since "Trained to convergence" in control/RESULTS.md: at 60 the
# attention head's BC loss was still falling and 3 of 5 drawer-open seeds failed in closed loop)
DEFAULT_BC_EPOCHS = 200
# what a policy config or benchmark result written before an option existed was made with
LEGACY_HEAD_OPTIONS = dict(keypoints=False, pos_code="learned", query_diversity=0.0, with_cls=False)
