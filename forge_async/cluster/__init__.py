"""The multi-node launcher, torchrun-style: `python -m forge_async.cluster` (docs/launching.md)."""
