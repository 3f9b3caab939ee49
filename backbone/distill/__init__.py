"""frozenvit.backbone.distill: the offline trainer that made the embedded default backbone.

Distils a timm ViT student from a frozen teacher (an ImageNet ConvNet or a ViT) on a folder of images,
with dense feature targets at chosen blocks, and ships the student into backbone/assets. Not part of
the runtime: nothing in frozenvit.backbone imports it.

    frozenvit distill --data IMAGES --out runs/distill --image-size 224 --epochs 10
    python -m frozenvit.backbone.distill ship --student runs/distill/student.safetensors --name NAME
"""
