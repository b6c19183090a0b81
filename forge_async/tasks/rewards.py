"""Reward functions for dataset tasks (`task.reward_fn`): `function(answer, completion_text) -> float`."""


def exact_match(answer: str, completion_text: str) -> float:
    """Default reward for datasets: 1 if the completion (stripped) equals the answer."""
    return float(completion_text.strip() == answer.strip())
