"""python -m frozenvit.backbone.distill distill ... | ship ... (errors as the `frozenvit` command reports them)"""
from .cli import cli_main

raise SystemExit(cli_main())
