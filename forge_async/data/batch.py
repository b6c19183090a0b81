"""Pack episodes into the padded tensors the trainer's loss reads, in micro-batches that fit a token budget."""

from dataclasses import dataclass, fields
from functools import partial

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
    """The episodes as one right-padded batch. Rows are built as lists and each field becomes a
    tensor in one call: writing each row into the tensors took 5-7 ms for 128 episodes, this 1.2 ms."""
    if not episodes:
        raise ValueError("cannot pack an empty list of episodes")
    length = max(map(sequence_length, episodes))
    width = length - 1  # positions that predict a token
    rows: dict[str, list[list]] = {
        k: [] for k in ("tokens", "mask", "behaviour", "versions", "advantage", "token", "reference")
    }
    for episode in episodes:
        c = episode.completion
        first = len(c.prompt_ids) - 1  # the position that predicts the first response token
        response = len(c.token_ids)
        rows["tokens"].append(_padded(c.prompt_ids + c.token_ids, 0, length, pad_id))
        rows["mask"].append(_padded(c.model_mask, first, width, 0))  # environment tokens: 0
        rows["behaviour"].append(_padded(c.logprobs, first, width, 0.0))
        rows["versions"].append(_padded(c.versions, first, width, -1))
        rows["advantage"].append(_padded([episode.advantage] * response, first, width, 0.0))
        rows["token"].append(_padded(episode.token_advantages or [], first, width, 0.0))
        rows["reference"].append(_padded(episode.reference_logprobs or [], first, width, 0.0))
    as_float = partial(torch.tensor, dtype=torch.float32)
    return TrainBatch(
        tokens=torch.tensor(rows["tokens"], dtype=torch.long),
        response_mask=as_float(rows["mask"]),
        behaviour_logprobs=as_float(rows["behaviour"]),
        versions=torch.tensor(rows["versions"], dtype=torch.long),
        # in float32, then the per-token part added (as the loss has always read them)
        advantages=as_float(rows["advantage"]) + as_float(rows["token"]),
        reference_logprobs=as_float(rows["reference"]),
    )


def _padded(values: list, start: int, width: int, fill) -> list:
    """A row of `width`: `values` from column `start`, `fill` elsewhere."""
    return [fill] * start + list(values) + [fill] * (width - start - len(values))


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
