"""Group-relative advantages (GRPO): each completion against its siblings of the same prompt."""

import statistics


def group_advantages(rewards: list[float], scale_by_std: bool = True, eps: float = 1e-4) -> list[float]:
    """A_i = (r_i - mean(r)) / (std(r) + eps), std over the group (population form);
    without `scale_by_std`, A_i = r_i - mean(r) (Dr.GRPO: no bias towards easy or hard groups)."""
    if not rewards:
        return []
    mean = statistics.fmean(rewards)
    if not scale_by_std:
        return [r - mean for r in rewards]
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]
