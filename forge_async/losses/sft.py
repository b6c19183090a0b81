"""Supervised fine-tuning's loss: the negative log-likelihood of demonstrations (apps.sft).

    loss = - sum_{i,t} mask_it * s_it * log pi_theta(y_it)

y_i1..y_iT_i are demonstration i's completion tokens (its answer's tokens, then the
tokenizer's EOS; tasks/demonstrations.py); the prompt's tokens are context only: they are
not among the response tokens the batch packs (data/batch.py), so nothing here can count
them. s_it is the aggregation's scale (`token_scale`: with the default token_mean, 1 / N
over the N demonstration tokens of the global batch), so the loss is the mean NLL per
demonstration token, and micro-batches and data-parallel ranks sum to the full batch's
gradient exactly as the GRPO loss does. Formulas of the aggregations: docs/loss.md.
"""

import torch

from forge_async.data.batch import TrainBatch


def demonstration_nll(logprobs: torch.Tensor, batch: TrainBatch, scale: torch.Tensor) -> torch.Tensor:
    """- sum_{i,t} s_it * log pi_theta(y_it) over the demonstration tokens (`logprobs`: [B, W], log pi_theta
    of each response token; `scale`: `token_scale`'s, already 0 outside the response)."""
    return -(logprobs * batch.response_mask * scale).sum()
