"""Hugging Face checkpoint directories: validate, read, write.

A checkpoint directory is what `save_pretrained` writes: config.json, one or more
*.safetensors files and the tokenizer files. It is the one format shared by every
part of the system: vLLM loads it, the trainer converts it to TorchTitan names,
and the final policy of a run is written back in it.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from forge_async.errors import UserError
from forge_async.models.shape import ModelShape

WEIGHTS_FILE = "model.safetensors"  # what this library writes (others may have shards)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


class CheckpointError(UserError):
    """A checkpoint path that cannot be used, with the reason."""


@dataclass(frozen=True)
class Checkpoint:
    """A validated checkpoint directory and its parsed model shape."""

    path: Path
    hf_config: dict
    shape: ModelShape

    @classmethod
    def open(cls, path: str | Path) -> "Checkpoint":
        path = Path(path).expanduser().resolve()
        if not path.is_dir():
            raise CheckpointError(f"checkpoint directory not found: {path}")
        config_file = path / "config.json"
        if not config_file.is_file():
            raise CheckpointError(f"{path} has no config.json: not a Hugging Face checkpoint")
        if not any(path.glob("*.safetensors")):
            raise CheckpointError(f"{path} has no *.safetensors weight files")
        hf_config = json.loads(config_file.read_text())
        return cls(path, hf_config, ModelShape.from_hf_config(hf_config, str(path)))

    @property
    def dtype(self) -> str:
        """The weights' dtype as config.json states it (vLLM's "auto" would run fp32 ones in bf16)."""
        return self.hf_config.get("dtype") or self.hf_config.get("torch_dtype") or "float32"

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight's shape, read from the files' headers (no tensor is loaded)."""
        shapes = {}
        for file in sorted(self.path.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                shapes.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})
        return shapes

    def load_hf_state_dict(self) -> dict[str, torch.Tensor]:
        state_dict: dict[str, torch.Tensor] = {}
        for file in sorted(self.path.glob("*.safetensors")):
            state_dict.update(load_file(str(file)))
        return state_dict


def save_config(directory: Path, hf_config: dict) -> None:
    """config.json, as `save_pretrained` lays it out."""
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2))


def save_weights(directory: str | Path, hf_state_dict: dict[str, torch.Tensor]) -> Path:
    """Write `WEIGHTS_FILE` into an existing `directory`, whole or not at all (a file renamed into
    place: a reader never sees a half-written one)."""
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in hf_state_dict.items()}
    path = Path(directory) / WEIGHTS_FILE
    partial = path.with_name(WEIGHTS_FILE + ".partial")
    save_file(tensors, str(partial), metadata={"format": "pt"})
    partial.replace(path)
    return path


def save_checkpoint(
    directory: str | Path,
    hf_config: dict,
    hf_state_dict: dict[str, torch.Tensor],
    tokenizer_from: Path | None = None,
) -> Path:
    """Write config.json + model.safetensors (+ tokenizer files copied from `tokenizer_from`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_config(directory, hf_config)
    save_weights(directory, hf_state_dict)
    if tokenizer_from is not None:
        for name in TOKENIZER_FILES:
            if (tokenizer_from / name).is_file():
                shutil.copy2(tokenizer_from / name, directory / name)
    return directory
