"""The contract of a backbone: geometry and preprocessing, derived once from the built model."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import GridMismatch

# The name of the embedded default ViT wherever a backbone is named (--backbone embedded, load_backbone("embedded"),
# control's encoders): the same as no name.
EMBEDDED_NAME = "embedded"


@dataclass(frozen=True)
class Grid:
    """Token grid of a ViT at one input size. Derived once, passed everywhere."""
    height: int        # pixels, after resize
    width: int
    patch: int

    def __post_init__(self) -> None:
        if self.height % self.patch or self.width % self.patch:
            raise GridMismatch(
                f"{self.height}x{self.width} px does not divide into {self.patch} px patches; "
                f"use an img_size that is a multiple of {self.patch} (e.g. "
                f"{max(self.patch, round(self.height / self.patch) * self.patch)}x"
                f"{max(self.patch, round(self.width / self.patch) * self.patch)})")

    @property
    def shape(self) -> tuple[int, int]:   # (h, w) in tokens
        return self.height // self.patch, self.width // self.patch

    @property
    def num_tokens(self) -> int:
        h, w = self.shape
        return h * w


@dataclass(frozen=True)
class BackboneConfig:
    """What a user of a backbone needs to know: grid, tokens, width and preprocessing.

    `img_size` and `grid` are the ones the model is BUILT at, not what the checkpoint's
    pretrained config reports (DINOv2 configs say 518 px even when built at 224).
    """
    name: str
    kind: str                          # "vit" or "cnn"
    img_size: tuple[int, int]          # (H, W) pixels fed to the model
    patch_size: int                    # pixels per token side (the feature stride for CNNs)
    grid: tuple[int, int]              # (h, w) tokens
    embed_dim: int                     # channels of the patch tokens (last stage for CNNs)
    depth: int                         # number of blocks (stages for CNNs)
    num_prefix_tokens: int             # CLS + registers + distillation token
    has_cls: bool
    num_registers: int
    has_dist_token: bool
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str                 # resize filter of the checkpoint ("bicubic", "bilinear", ...)
    crop_pct: float                    # reported for reference; dense extraction never crops
    weights_sha256: str | None = None  # of the weights file, None for hub/random weights
    pretrained: bool = True            # False: random initialisation, asked for explicitly
    num_params: int = 0
    # ConvNets only (a ViT's blocks share `grid` and `patch_size`): each stage's nominal stride in pixels and
    # its grid as measured at img_size (a stage of stride 32 on 240 px is 8x8 with "same" padding, 7x7 without)
    strides: tuple[int, ...] = ()
    grids: tuple[tuple[int, int], ...] = ()

    def grid_of(self, block: int) -> tuple[int, int]:
        """(h, w) tokens of `block`'s grid (0-based): the one grid of a ViT, a ConvNet stage's own."""
        return tuple(self.grids[block]) if self.grids else tuple(self.grid)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        prefix = []
        if self.has_cls:
            prefix.append("1 CLS")
        if self.num_registers:
            prefix.append(f"{self.num_registers} register")
        if self.has_dist_token:
            prefix.append("1 distillation")
        lines = [
            f"name            {self.name}" + ("" if self.pretrained else "   (RANDOM weights)"),
            f"kind            {self.kind}",
            f"input           {self.img_size[0]}x{self.img_size[1]} px, {self.interpolation} resize",
            f"patch size      {self.patch_size} px",
            f"grid            {self.grid[0]}x{self.grid[1]} tokens ({self.grid[0] * self.grid[1]})",
            *([f"stages          " + ", ".join(f"{i}: stride {s} ({g[0]}x{g[1]})"
                                                   for i, (s, g) in enumerate(zip(self.strides, self.grids)))]
              if self.grids else []),
            f"prefix tokens   {self.num_prefix_tokens}" + (f" ({' + '.join(prefix)})" if prefix else ""),
            f"blocks          {self.depth}",
            f"width           {self.embed_dim}",
            f"mean            {tuple(round(m, 4) for m in self.mean)}",
            f"std             {tuple(round(s, 4) for s in self.std)}",
            f"crop_pct        {self.crop_pct} (not applied: dense maps need the whole image)",
            f"parameters      {self.num_params / 1e6:.2f} M",
            f"weights sha256  {self.weights_sha256 or '-'}",
        ]
        return "\n".join(lines)
