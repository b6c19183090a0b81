"""Supervised fine-tuning on (prompt, answer) pairs: `python -m apps.sft [hydra overrides]`."""
