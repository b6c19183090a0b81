"""LoRA on the TorchTitan model: TorchTitan's own LoRA converter, and its adapters in PEFT names.

`models/titan.py`'s `with_lora` rewrites the model config with TorchTitan's `LoRAConverter`:
each target Linear becomes a LoRALinear (frozen base weight, trainable `lora_a` [rank, in]
and `lora_b` [out, rank], output W x + (alpha / rank) lora_b(lora_a(x))), every other
module is frozen. `lora_b` starts at zero, so version 0 is the base model exactly.

`AdapterNames` maps each LoRALinear to its Hugging Face module, for the PEFT names that
cross to the generators and go into the saved adapter. The family's state-dict adapter
may reorder a weight's rows on the way to HF (Llama's q/k projections: RoPE pairs); the
same reorder applies to lora_b's rows (lora_a acts on the inputs, which keep their order).
It is found once by converting a matrix of row indices, so no family's layout is
restated here.
"""

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from forge_async.models.parallelize import unsharded
from forge_async.models.peft import peft_key

if TYPE_CHECKING:  # the trainer's actor module imports this one; the controller needs no TorchTitan
    from torchtitan.protocols.state_dict_adapter import StateDictAdapter

# Adapters are initialised from this seed: every rank (and every rank count) starts alike.
INIT_SEED = 0


def is_adapter(name: str) -> bool:
    """Whether a TorchTitan parameter name belongs to a LoRA adapter."""
    return ".lora_a." in name or ".lora_b." in name


class AdapterNames:
    """Each LoRALinear of a model, its Hugging Face module name and lora_b's row order there."""

    def __init__(self, model: nn.Module, adapter: "StateDictAdapter"):
        self._modules: dict[str, tuple[str, torch.Tensor | None]] = {}
        for name, module in model.named_modules():
            if hasattr(module, "lora_a"):
                self._modules[name] = _hf_module_and_rows(name, module.weight, adapter)

    def to_peft(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The adapter tensors of a TorchTitan state dict (DTensor shards or full), in PEFT names.

        A reordered lora_b is gathered first (indexing rows of a shard would mix ranks' rows)."""
        peft = {}
        for name, (hf_module, rows) in self._modules.items():
            peft[peft_key(hf_module, "A")] = state_dict[f"{name}.lora_a.weight"]
            b = state_dict[f"{name}.lora_b.weight"]
            peft[peft_key(hf_module, "B")] = b if rows is None else unsharded(b)[rows]
        return peft

    def merge(self, state_dict: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
        """A full TorchTitan state dict with each adapted weight replaced by W + scale * B A
        (computed in fp32) and the adapters removed: the policy as a plain model."""
        merged = {name: t for name, t in state_dict.items() if not is_adapter(name)}
        for name in self._modules:
            weight = merged[f"{name}.weight"]
            a, b = state_dict[f"{name}.lora_a.weight"], state_dict[f"{name}.lora_b.weight"]
            product = b.float() @ a.float()
            merged[f"{name}.weight"] = (weight.float() + scale * product).to(weight.dtype)
        return merged


def _hf_module_and_rows(name: str, weight: torch.Tensor, adapter: "StateDictAdapter"):
    """The HF module of TorchTitan linear `name`, and the HF row order (None if unchanged)."""
    out_features, in_features = weight.shape
    indices = torch.arange(out_features, dtype=torch.float32)[:, None].repeat(1, in_features)
    ((hf_name, reordered),) = adapter.to_hf({f"{name}.weight": indices}).items()
    rows = reordered[:, 0].long()
    unchanged = torch.equal(rows, torch.arange(out_features))
    return hf_name.removesuffix(".weight"), None if unchanged else rows
