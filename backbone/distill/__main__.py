"""python -m frozenvit.backbone.distill distill ... | ship ..."""
from .cli import main

raise SystemExit(main())
