"""The one LoRA adapter a generator's requests run with, replaced in place between engine steps.

vLLM serves base + adapter when the engine starts with `enable_lora=True` and each
request carries a `LoRARequest`; it loads adapters from a PEFT directory. Here every
request carries the same request (one adapter id), whose directory this class owns. A
new version is written into that directory and loaded with `load_inplace=True` under
the same id: vLLM replaces the adapter's weights in its slot, the base weights stay,
and requests already running compute their next step with the new adapter (an
in-flight swap, as with full weights). It starts as a zero adapter (B A = 0), which is
the base model exactly, like the trainer's version 0.
"""

import tempfile
from pathlib import Path

import torch

from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig
from forge_async.models.peft import save_adapter, write_adapter_weights, zero_adapter

_ADAPTER_ID = 1
_NAME = "policy"
_VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted max_lora_rank values


class AdapterSlot:
    def __init__(self, lora: LoraConfig, checkpoint: Checkpoint, dtype: torch.dtype):
        from vllm.lora.request import LoRARequest

        self.lora = lora
        # In the process's temporary directory: a generator's is the run's scratch directory
        # (weights/scratch.py), in memory. Removed by `remove`, or when collected.
        self._directory = tempfile.TemporaryDirectory(prefix="forge_async-adapter-")
        self.path = Path(self._directory.name)
        save_adapter(self.path, zero_adapter(checkpoint.weight_shapes(), lora, dtype), lora, str(checkpoint.path))
        self.request = LoRARequest(_NAME, _ADAPTER_ID, str(self.path))
        self._reload = LoRARequest(_NAME, _ADAPTER_ID, str(self.path), load_inplace=True)

    def llm_kwargs(self) -> dict:
        """vLLM engine options for serving this adapter."""
        return {"enable_lora": True, "max_loras": 1, "max_lora_rank": _vllm_max_rank(self.lora.adapter_rank)}

    def remove(self) -> None:
        self._directory.cleanup()

    def load(self, llm, tensors: dict[str, torch.Tensor]) -> None:
        """Make `tensors` (PEFT names) the adapter every request runs with, from the next step."""
        write_adapter_weights(self.path, tensors)
        llm.llm_engine.add_lora(self._reload)


def _vllm_max_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that fits `rank` (LoraConfig caps it at 512)."""
    return next(r for r in _VLLM_RANKS if r >= rank)
