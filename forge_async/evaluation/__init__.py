"""Evaluation during training: held-out prompts, each pass pinned to one policy version."""
