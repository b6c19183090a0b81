"""Checkpoints and models: create, load, convert between Hugging Face and TorchTitan."""

from forge_async.models.checkpoint import Checkpoint, CheckpointError, save_checkpoint
from forge_async.models.tiny import TinyModelConfig, create_tiny_checkpoint
from forge_async.models.titan import ModelShape, UnsupportedModelError

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ModelShape",
    "TinyModelConfig",
    "UnsupportedModelError",
    "create_tiny_checkpoint",
    "save_checkpoint",
]
