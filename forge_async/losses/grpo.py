"""GRPO's policy-gradient loss over packed episodes.

    loss = - sum_{i,t} mask_it * A_i * log pi_theta(y_it) / normaliser

Sequence-level advantages A_i (group-relative, computed before the batch reaches
the trainer) weight every response token of episode i. The normaliser is the
number of response tokens in the *global* batch, so data-parallel ranks that
each hold a slice of it and sum their gradients get exactly the full-batch
gradient.
"""

import torch
import torch.nn.functional as F

from forge_async.data.batch import TrainBatch


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(tokens[:, t+1] | tokens[:, :t+1]) for every t: shape [B, L-1], fp32."""
    logprobs = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return logprobs.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)


def policy_gradient_loss(
    logprobs: torch.Tensor, batch: TrainBatch, normaliser: float
) -> torch.Tensor:
    per_token = -batch.advantages.unsqueeze(1) * logprobs * batch.response_mask
    return per_token.sum() / normaliser
