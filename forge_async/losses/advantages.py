"""Group-relative advantages (GRPO): each completion against its siblings of the same prompt."""

import statistics


def group_advantages(rewards: list[float], eps: float = 1e-4) -> list[float]:
    """A_i = (r_i - mean(r)) / (std(r) + eps), std over the group (population form)."""
    if not rewards:
        return []
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]
