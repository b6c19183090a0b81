"""Pack episodes into the tensors the trainer's forward and loss read, in micro-batches that fit a token budget.

A row of the forward holds one prompt and the responses of the episodes that share it
(`trainer.share_prompts`; GRPO samples a group of responses per prompt), so the prompt
is computed once for all of them, as long as that saves more than the longer row's
attention costs. Each response attends to the prompt and to its own
earlier tokens only (an explicit attention mask) at the positions it had when it was
sampled, so its logits are those of the response alone. When no two episodes share a
prompt, or sharing is off, a row is one sequence under plain causal attention.
"""

from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import numpy as np
import torch

from forge_async.data.episode import Completion, Episode
from forge_async.models.shape import UNKNOWN_ROUTE

Row = list[Episode]  # the episodes one row of the forward holds; all have the first one's prompt
_PAD_SEGMENT = -1  # segment ids of a row's tokens: 0 the prompt, i the row's i-th response, -1 padding


@dataclass
class TrainBatch:
    """Rows for one forward, and the response tokens it predicts, one episode per row.

    The per-token tensors ([B, W]: episode, response token; right-padded) hold each
    response token's figures; `logit_index` says which output of the forward (rows and
    positions flattened) predicts that token.
    """

    tokens: torch.Tensor  # [R, L] int64: each row's prompt, then its responses, right-padded
    positions: torch.Tensor | None  # [R, L] each token's position in its own sequence; None: 0..L-1
    attention_mask: torch.Tensor | None  # [R, 1, L, L] bool, True where a token sees another; None: causal
    logit_index: torch.Tensor  # [B, W] int64: the flattened [R * L] forward output that predicts the token
    targets: torch.Tensor  # [B, W] int64: the response token
    response_mask: torch.Tensor  # [B, W] float, 1 where the model sampled the token (0: environment, padding)
    behaviour_logprobs: torch.Tensor  # [B, W] the generator's logprob of the token
    versions: torch.Tensor  # [B, W] int64 policy version of the token (-1 if none)
    advantages: torch.Tensor  # [B, W] advantage of the token
    reference_logprobs: torch.Tensor  # [B, W] log pi_ref of the token (0 if no reference)
    # [R, L, MoE layers, top_k] uint8: the experts the generator routed each row token to
    # (UNKNOWN_ROUTE where it recorded none); None: no episode brought routes
    routes: torch.Tensor | None = None
    # The kept sets of the response tokens (sampling.keep_mask, data/kept_sets.py): [K] int64 each,
    # which flattened [B * W] token each id belongs to (ascending) and the id; None: no set in the batch
    kept_tokens: torch.Tensor | None = None
    kept_ids: torch.Tensor | None = None

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    def to(self, device: str | torch.device) -> "TrainBatch":
        moved: dict[str, Any] = {f.name: _to(getattr(self, f.name), device) for f in fields(self)}  # None stays None
        return TrainBatch(**moved)


def _to(tensor: torch.Tensor | None, device: str | torch.device) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device)


def prompt_rows(episodes: list[Episode], token_cost: float | None) -> list[Row]:
    """The episodes as rows: each joins the open row of its prompt while that costs less than a
    row of its own (`_sharing_pays`), else opens a new one. `token_cost`: one token through the
    linear layers, in query-key pairs of attention (ModelShape.token_cost_in_attention_pairs);
    None: one episode per row."""
    if token_cost is None:
        return [[episode] for episode in episodes]
    rows: list[Row] = []
    open_rows: dict[tuple[int, ...], Row] = {}
    for episode in episodes:
        prompt = tuple(episode.completion.prompt_ids)
        row = open_rows.get(prompt)
        if row is not None and _sharing_pays(row, episode, token_cost):
            row.append(episode)
        else:
            open_rows[prompt] = [episode]
            rows.append(open_rows[prompt])
    return rows


def _sharing_pays(row: Row, episode: Episode, token_cost: float) -> bool:
    """Appending `episode` to `row` saves its prompt's linear layers and costs the longer row's
    extra attention (a masked row computes every pair) less the causal half its own row would
    have computed: long responses behind a short prompt are cheaper in rows of their own."""
    prompt, response = len(episode.completion.prompt_ids), len(episode.completion.token_ids)
    length = row_length(row)
    extra_pairs = (length + response) ** 2 - length**2 - (prompt + response) ** 2 / 2
    return prompt * token_cost >= extra_pairs


def row_length(row: Row) -> int:
    """Tokens of the row: its prompt once, then every response."""
    return len(row[0].completion.prompt_ids) + sum(len(e.completion.token_ids) for e in row)


def pack_episodes(episodes: list[Episode], pad_id: int, token_cost: float | None = None) -> TrainBatch:
    """The episodes as one batch (`prompt_rows`, then `pack_rows`); by default one per row."""
    return pack_rows(prompt_rows(episodes, token_cost), pad_id)


def pack_rows(rows: list[Row], pad_id: int) -> TrainBatch:
    """The rows as one right-padded batch. Values are gathered as lists and each field becomes a
    tensor in one call: writing each row into preallocated tensors, one small copy at a time,
    is several times slower."""
    if not rows or not all(rows):
        raise ValueError("cannot pack an empty list of episodes")
    length = max(map(row_length, rows))
    width = max(len(e.completion.token_ids) for row in rows for e in row)
    inputs: dict[str, list[list[int]]] = {"tokens": [], "positions": [], "segments": []}
    columns: dict[str, list[list]] = {
        k: [] for k in ("index", "target", "mask", "behaviour", "versions", "advantage", "token", "reference")
    }
    for r, row in enumerate(rows):
        prompt = row[0].completion.prompt_ids
        tokens, positions, segments = list(prompt), list(range(len(prompt))), [0] * len(prompt)
        for segment, episode in enumerate(row, start=1):
            c = episode.completion
            start, n = len(tokens), len(c.token_ids)
            # The prompt's last output predicts the first response token; each response token's, the next.
            index = [r * length + (len(prompt) - 1 if k == 0 else start + k - 1) for k in range(n)]
            tokens += c.token_ids
            positions += range(len(prompt), len(prompt) + n)
            segments += [segment] * n
            _append_columns(columns, episode, index, width)
        padding = length - len(tokens)
        inputs["tokens"].append(tokens + [pad_id] * padding)
        inputs["positions"].append(positions + [0] * padding)
        inputs["segments"].append(segments + [_PAD_SEGMENT] * padding)
    shared = any(len(row) > 1 for row in rows)
    as_float = partial(torch.tensor, dtype=torch.float32)
    return TrainBatch(
        tokens=torch.tensor(inputs["tokens"], dtype=torch.long),
        positions=torch.tensor(inputs["positions"], dtype=torch.long) if shared else None,
        attention_mask=_prefix_sharing_mask(torch.tensor(inputs["segments"])) if shared else None,
        logit_index=torch.tensor(columns["index"], dtype=torch.long),
        targets=torch.tensor(columns["target"], dtype=torch.long),
        response_mask=as_float(columns["mask"]),
        behaviour_logprobs=as_float(columns["behaviour"]),
        versions=torch.tensor(columns["versions"], dtype=torch.long),
        # the outcome advantage and the per-token part, each in float32, summed in float32
        advantages=as_float(columns["advantage"]) + as_float(columns["token"]),
        reference_logprobs=as_float(columns["reference"]),
        routes=_packed_routes(rows, length),
        **_packed_kept_sets([e for row in rows for e in row], width),
    )


def _packed_routes(rows: list[Row], length: int) -> torch.Tensor | None:
    """Each row token's route, laid out as `pack_rows` lays out the tokens: the prompt's from the
    row's first episode, each response's from its own completion. A response's last token has
    none (it was never fed to the generator's model): it stays UNKNOWN_ROUTE, as does padding."""
    recorded = [e.completion.routes for row in rows for e in row if e.completion.routes is not None]
    if not recorded:
        return None
    packed = np.full((len(rows), length, *recorded[0].shape[1:]), UNKNOWN_ROUTE, dtype=np.uint8)
    for r, row in enumerate(rows):
        prompt = len(row[0].completion.prompt_ids)
        if row[0].completion.routes is not None:
            prompt_routes = row[0].completion.routes[:prompt]
            packed[r, : len(prompt_routes)] = prompt_routes
        start = prompt
        for episode in row:
            c = episode.completion
            if c.routes is not None:
                response_routes = c.routes[len(c.prompt_ids) :]
                packed[r, start : start + len(response_routes)] = response_routes
            start += len(c.token_ids)
    return torch.from_numpy(packed)


def _packed_kept_sets(episodes: list[Episode], width: int) -> dict[str, torch.Tensor | None]:
    """The episodes' kept sets as `kept_tokens` and `kept_ids` (episode b's token k is flattened
    token b * width + k, the order of the batch's [B, W] tensors)."""
    sets = [(b, e.completion.kept_sets) for b, e in enumerate(episodes) if e.completion.kept_sets is not None]
    if not any(len(kept.ids) for _, kept in sets):
        return {"kept_tokens": None, "kept_ids": None}
    tokens = [np.repeat(b * width + np.arange(len(kept)), kept.sizes) for b, kept in sets]
    ids = [kept.ids for _, kept in sets]
    return {
        "kept_tokens": torch.from_numpy(np.concatenate(tokens).astype(np.int64)),
        "kept_ids": torch.from_numpy(np.concatenate(ids).astype(np.int64)),
    }


def _append_columns(columns: dict[str, list[list]], episode: Episode, index: list[int], width: int) -> None:
    """One episode's per-token values, right-padded to `width`."""
    c = episode.completion
    n = len(c.token_ids)
    columns["index"].append(_padded(index, width, 0))
    columns["target"].append(_padded(c.token_ids, width, 0))
    columns["mask"].append(_padded(c.model_mask, width, 0))  # environment tokens: 0
    columns["behaviour"].append(_padded(behaviour_logprobs(c), width, 0.0))
    columns["versions"].append(_padded(c.versions, width, -1))
    columns["advantage"].append(_padded([episode.advantage] * n, width, 0.0))
    columns["token"].append(_padded(episode.token_advantages or [], width, 0.0))
    columns["reference"].append(_padded(episode.reference_logprobs or [], width, 0.0))


def behaviour_logprobs(c: Completion) -> list[float]:
    """log pi_behaviour of each token over the distribution the trainer computes its own on: over
    the token's kept set where it has one, else over the whole tempered vocabulary (the reported
    logprob plus its log mass, data/kept_sets.py: a set over the cap, or none recorded)."""
    if c.kept_sets is None:
        return c.logprobs
    return [lp if size else whole for lp, whole, size in zip(c.logprobs, c.whole_logprobs, c.kept_sets.sizes)]


def _padded(values: list, width: int, fill) -> list:
    """`values`, then `fill` up to `width`."""
    return list(values) + [fill] * (width - len(values))


def _prefix_sharing_mask(segments: torch.Tensor) -> torch.Tensor:
    """[R, 1, L, L]: causal, and a response token sees the prompt and its own response only.
    Padding sees what precedes it (a query that sees nothing makes NaNs, even where unused)."""
    length = segments.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    query, key = segments[:, :, None], segments[:, None, :]
    visible = (key == 0) | (key == query) | (query == _PAD_SEGMENT)
    return (causal & visible).unsqueeze(1)


def micro_batches(rows: list[Row], token_budget: int | None) -> list[list[Row]]:
    """Split rows into micro-batches whose padded size (rows x longest row) fits `token_budget`.

    A row longer than the budget is first cut into rows of fewer episodes (each keeps the
    prompt). Rows are bucketed by length (longest first), so each micro-batch pads little. A
    single sequence longer than the budget gets a micro-batch of its own. None: one micro-batch.
    """
    if not rows:
        return []
    if token_budget is None:
        return [list(rows)]
    batches: list[list[Row]] = []
    current: list[Row] = []
    pieces = [piece for row in rows for piece in _split_row(row, token_budget)]
    for row in sorted(pieces, key=row_length, reverse=True):
        longest = row_length(current[0]) if current else row_length(row)
        if current and (len(current) + 1) * longest > token_budget:
            batches.append(current)
            current = []
        current.append(row)
    if current:
        batches.append(current)
    return batches


def _split_row(row: Row, token_budget: int) -> list[Row]:
    """The row's episodes in consecutive rows that each fit the budget (a lone episode may not)."""
    pieces: list[Row] = [[]]
    length = len(row[0].completion.prompt_ids)
    for episode in row:
        response = len(episode.completion.token_ids)
        if pieces[-1] and length + response > token_budget:
            pieces.append([])
            length = len(row[0].completion.prompt_ids)
        pieces[-1].append(episode)
        length += response
    return pieces
