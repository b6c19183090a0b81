"""The kept sets vLLM's sampler should have kept for a completion, and those it carries."""

import torch

from forge_async.data.episode import ENV_TOKEN, Completion
from forge_async.generation.config import SamplingConfig


def expected_sets(model, completion: Completion, config: SamplingConfig) -> list[list[int] | None]:
    """Per token: what vLLM's sampler keeps of the trainer model's logits at that position (its
    order: temperature, min-p, then vLLM's own top-k/top-p code); None for environment tokens."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    sequence = torch.tensor([completion.prompt_ids + completion.token_ids])
    with torch.no_grad():
        logits = model(sequence)[0, len(completion.prompt_ids) - 1 : -1].float() / config.temperature
    if config.min_p:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < config.min_p * probs.max(-1, keepdim=True).values, -torch.inf)
    rows = len(logits)
    k = torch.full((rows,), config.top_k) if config.top_k else None
    p = torch.full((rows,), config.top_p) if config.top_p < 1 else None
    kept = apply_top_k_top_p_pytorch(logits.clone(), k, p).isfinite()
    return [None if v == ENV_TOKEN else row.nonzero().flatten().tolist() for row, v in zip(kept, completion.versions)]


def recorded_sets(completion: Completion) -> list[list[int] | None]:
    """Per token: the set the completion carries (None: none)."""
    sets, start = [], 0
    for size in completion.kept_sets.sizes.tolist():
        sets.append(completion.kept_sets.ids[start : start + size].tolist() or None)
        start += size
    return sets
