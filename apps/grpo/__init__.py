"""The GRPO application: `python -m apps.grpo [hydra overrides]`."""
