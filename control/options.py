"""Defaults of the attention head that the CLI needs without importing torch (`frozenvit --help` stays light).

The attention head's defaults since the held-out test in control/RESULTS.md ("Queries kept apart"):
a fixed 2-d sine-cosine position code with orthogonal queries, and a penalty of weight 0.02 on
queries whose attention maps overlap. Policies saved before these options existed load as
"learned" / 0.0, which is what they were trained with.
"""
POS_CODES = ("learned", "sincos")
DEFAULT_POS_CODE = "sincos"
DEFAULT_QUERY_DIVERSITY = 0.02
# what a policy config or benchmark result written before an option existed was made with
LEGACY_HEAD_OPTIONS = dict(keypoints=False, pos_code="learned", query_diversity=0.0, with_cls=False)
