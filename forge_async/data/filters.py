"""Dynamic sampling: groups that carry no learning signal are dropped before training.

A group whose completions all got the same reward has zero outcome advantage, so unless a
scorer gave its tokens a signal of their own (a teacher's per-token advantages,
`Episode.token_advantages`) its tokens add nothing to the policy gradient but still take a
batch slot (DAPO's dynamic sampling). With `filter.zero_variance_groups=true` the replay
buffer drops such groups as they arrive, counted under the reason "zero_variance", and the
batch is filled with groups that do carry signal (generation goes on until it is). A group
whose rewards are all equal but whose tokens carry a teacher's non-zero signal is kept.

When nearly every group carries no signal (a task almost solved, or not yet learnable at
all), filling a batch could take unbounded generation. `filter.max_oversampling` caps it:
between two training batches the buffer drops at most that many batches' worth of such
episodes; groups beyond the cap are kept and trained on (counted as kept_zero_variance),
so the run goes on.
"""

from collections import defaultdict

from forge_async.data.episode import Episode


def split_zero_variance_groups(episodes: list[Episode]) -> tuple[list[Episode], list[Episode]]:
    """(episodes of groups that carry signal, episodes of groups that carry none), each in arrival
    order. A group is the episodes that share a group_id within `episodes`; it carries none when
    its rewards are all equal and no episode of it has a non-zero per-token advantage."""
    rewards = defaultdict(set)
    token_signal = set()  # group ids with a non-zero per-token advantage
    for episode in episodes:
        rewards[episode.group_id].add(episode.reward)
        if any(episode.token_advantages or ()):
            token_signal.add(episode.group_id)
    signal = {g for g, r in rewards.items() if len(r) > 1} | token_signal
    kept = [e for e in episodes if e.group_id in signal]
    dropped = [e for e in episodes if e.group_id not in signal]
    return kept, dropped


def whole_groups_within(episodes: list[Episode], budget: int) -> tuple[list[Episode], list[Episode]]:
    """(the episodes of the first groups that fit in `budget` episodes together, the others)."""
    sizes: dict[int, int] = defaultdict(int)
    for episode in episodes:
        sizes[episode.group_id] += 1
    within, used = set(), 0
    for group_id, size in sizes.items():
        if used + size > budget:
            break
        within.add(group_id)
        used += size
    return [e for e in episodes if e.group_id in within], [e for e in episodes if e.group_id not in within]
