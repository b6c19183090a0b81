"""LoRA adapters in PEFT's directory layout: adapter_config.json + adapter_model.safetensors.

The layout PEFT's `save_pretrained` writes and both PEFT's `from_pretrained` and vLLM's
`LoRARequest` load: for each adapted linear layer (its Hugging Face module name, e.g.
`model.layers.0.self_attn.q_proj`) two tensors,

    base_model.model.<module>.lora_A.weight   [rank, in_features]
    base_model.model.<module>.lora_B.weight   [out_features, rank]

and the layer computes W x + (lora_alpha / r) B A x. Written here without PEFT itself.
Light: torch and safetensors only (the generator writes adapters too).
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from forge_async.models.config import LoraConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_PREFIX = "base_model.model."


def peft_key(hf_module: str, factor: str) -> str:
    """The PEFT tensor name of factor "A" or "B" of the adapter on `hf_module`."""
    return f"{_PREFIX}{hf_module}.lora_{factor}.weight"


def target_modules(hf_weight_names: list[str], lora: LoraConfig) -> list[str]:
    """The Hugging Face modules (of a checkpoint's weight names) that `lora.targets` adapts."""
    modules = [name.removesuffix(".weight") for name in hf_weight_names if name.endswith(".weight")]
    return [m for m in modules if m.rsplit(".", 1)[-1] in lora.targets]


def zero_adapter(hf_shapes: dict[str, tuple[int, ...]], lora: LoraConfig, dtype: torch.dtype) -> dict:
    """An adapter whose product B A is zero: the base model exactly (what the trainer's v0 is)."""
    tensors: dict[str, torch.Tensor] = {}
    rank = lora.adapter_rank
    for module in target_modules(list(hf_shapes), lora):
        out_features, in_features = hf_shapes[f"{module}.weight"]
        tensors[peft_key(module, "A")] = torch.zeros(rank, in_features, dtype=dtype)
        tensors[peft_key(module, "B")] = torch.zeros(out_features, rank, dtype=dtype)
    return tensors


def adapter_config(lora: LoraConfig, base_model: str) -> dict:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "target_modules": sorted(lora.targets),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "inference_mode": True,
    }


def write_adapter_weights(directory: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    """(Re)write adapter_model.safetensors in `directory`."""
    contiguous = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
    save_file(contiguous, str(Path(directory) / WEIGHTS_FILE), metadata={"format": "pt"})


def save_adapter(directory: str | Path, tensors: dict[str, torch.Tensor], lora: LoraConfig, base_model: str) -> Path:
    """Write a PEFT adapter directory: adapter_config.json and adapter_model.safetensors."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(adapter_config(lora, base_model), indent=2))
    write_adapter_weights(directory, tensors)
    return directory
