"""Dynamic sampling: groups that carry no learning signal are dropped before training.

A group whose completions all got the same reward has zero advantage everywhere, so its
tokens add nothing to the policy gradient but still take a batch slot (DAPO's dynamic
sampling). With `filter.zero_variance_groups=true` the replay buffer drops such groups as
they arrive, counted under the reason "zero_variance", and the batch is filled with
groups that do carry signal (generation goes on until it is).
"""

from collections import defaultdict
from dataclasses import dataclass

from forge_async.data.episode import Episode


@dataclass
class FilterConfig:
    zero_variance_groups: bool = False  # drop groups whose rewards are all equal


def split_zero_variance_groups(episodes: list[Episode]) -> tuple[list[Episode], list[Episode]]:
    """(episodes of groups whose rewards differ, episodes of groups whose rewards are all equal),
    each in arrival order. A group is the episodes that share a group_id within `episodes`."""
    rewards = defaultdict(set)
    for episode in episodes:
        rewards[episode.group_id].add(episode.reward)
    kept = [e for e in episodes if len(rewards[e.group_id]) > 1]
    dropped = [e for e in episodes if len(rewards[e.group_id]) <= 1]
    return kept, dropped
