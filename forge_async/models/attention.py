"""TorchTitan's SDPA inner attention, plus an explicit boolean mask when the batch brings one.

TorchTitan's `ScaledDotProductAttention` is causal only. The trainer packs a prompt's
responses into one row behind their shared prompt (data/batch.py), which needs a mask
that is causal *and* keeps each response from seeing the others. PyTorch's SDPA takes
such a mask on CPU and GPU, with a backward on both (flex attention has no CPU backward).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.models.common.attention import ScaledDotProductAttention


class MaskableAttention(ScaledDotProductAttention):
    """Causal SDPA, or SDPA under `attention_masks` ([B, 1, L, L] bool, True: may attend) when given."""

    @dataclass(kw_only=True, slots=True)
    class Config(ScaledDotProductAttention.Config):
        pass

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: torch.Tensor | None = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        if attention_masks is None:
            return super().forward(q_BLNH, k_BLNH, v_BLNH, scale=scale, enable_gqa=enable_gqa, **kwargs)
        q, k, v = (x.transpose(1, 2) for x in (q_BLNH, k_BLNH, v_BLNH))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_masks, scale=scale, enable_gqa=enable_gqa)
        return out.transpose(1, 2)
