"""Pack episodes into the padded tensors the trainer's loss reads, in micro-batches that fit a token budget."""

from dataclasses import dataclass, fields

import torch

from forge_async.data.episode import Episode


@dataclass
class TrainBatch:
    """Right-padded sequences (prompt + response), one episode per row.

    Position t of every per-token tensor refers to the token at t+1 in `tokens`
    (the token the model predicts from position t), so they line up with the
    logits of `tokens[:, :-1]`.
    """

    tokens: torch.Tensor  # [B, L] int64
    response_mask: torch.Tensor  # [B, L-1] float, 1 where position t predicts a token the model sampled
    behaviour_logprobs: torch.Tensor  # [B, L-1] generator's logprob of each predicted token
    versions: torch.Tensor  # [B, L-1] int64 policy version of each predicted token (-1 if none)
    advantages: torch.Tensor  # [B, L-1] advantage of each predicted token (0 outside the response)
    reference_logprobs: torch.Tensor  # [B, L-1] log pi_ref of each predicted token (0 if no reference)

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    def _map(self, fn) -> "TrainBatch":
        return TrainBatch(**{f.name: fn(getattr(self, f.name)) for f in fields(self)})

    def to(self, device: str | torch.device) -> "TrainBatch":
        return self._map(lambda t: t.to(device))


def sequence_length(episode: Episode) -> int:
    return len(episode.completion.prompt_ids) + len(episode.completion.token_ids)


def pack_episodes(episodes: list[Episode], pad_id: int) -> TrainBatch:
    if not episodes:
        raise ValueError("cannot pack an empty list of episodes")
    length = max(map(sequence_length, episodes))
    n = len(episodes)
    tokens = torch.full((n, length), pad_id, dtype=torch.long)
    mask = torch.zeros(n, length - 1)
    behaviour = torch.zeros(n, length - 1)
    versions = torch.full((n, length - 1), -1, dtype=torch.long)
    advantages = torch.zeros(n, length - 1)
    reference = torch.zeros(n, length - 1)
    for row, episode in enumerate(episodes):
        c = episode.completion
        prompt_len, response_len = len(c.prompt_ids), len(c.token_ids)
        tokens[row, : prompt_len + response_len] = torch.tensor(c.prompt_ids + c.token_ids)
        predicted = slice(prompt_len - 1, prompt_len - 1 + response_len)
        mask[row, predicted] = torch.tensor(c.model_mask, dtype=mask.dtype)  # environment tokens: 0
        behaviour[row, predicted] = torch.tensor(c.logprobs)
        versions[row, predicted] = torch.tensor(c.versions)
        advantages[row, predicted] = episode.advantage
        if episode.token_advantages is not None:
            advantages[row, predicted] += torch.tensor(episode.token_advantages)
        if episode.reference_logprobs is not None:
            reference[row, predicted] = torch.tensor(episode.reference_logprobs)
    return TrainBatch(tokens, mask, behaviour, versions, advantages, reference)


def micro_batches(episodes: list[Episode], token_budget: int | None) -> list[list[Episode]]:
    """Split episodes into micro-batches whose padded size (rows x longest row) fits `token_budget`.

    Episodes are bucketed by length (longest first), so each micro-batch pads little. A
    sequence longer than the budget gets a micro-batch of its own. None: one micro-batch.
    """
    if not episodes:
        return []
    if token_budget is None:
        return [list(episodes)]
    batches: list[list[Episode]] = []
    current: list[Episode] = []
    for episode in sorted(episodes, key=sequence_length, reverse=True):
        longest = sequence_length(current[0]) if current else sequence_length(episode)
        if current and (len(current) + 1) * longest > token_budget:
            batches.append(current)
            current = []
        current.append(episode)
    if current:
        batches.append(current)
    return batches
