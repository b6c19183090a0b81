"""On-policy distillation: `python -m apps.distill [hydra overrides]`."""
