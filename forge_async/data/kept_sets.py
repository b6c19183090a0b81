"""The tokens the sampler kept for each sampled token (top-k / top-p / min-p), for the trainer to
compute its log-probabilities over the same sets ("keep sampling mask").

A generator that samples from a truncated distribution records, at every step, which token ids
survived the truncation (generation/kept_set_capture.py). The trainer masks every other logit
before its softmax (losses/sliced_softmax.py), so its log-probabilities, the importance ratios
built on them and the entropy are those of the distribution the generator really sampled.

Stored compactly: the ids of every token's set one after the other (int32, ascending within a
set) and each token's set size. Size 0 means no set: an environment's token, a greedy step, a
set larger than `sampling.kept_set_cap` (counted in `over_cap`), or a run that records no ids
(`sampling.keep_mask=false`); the trainer uses the whole vocabulary there. A set of up to the
cap's ids takes 4 bytes an id: at the default cap of 1,024, at most 4 KiB a token, less than a
bitmask of a 151,936-token vocabulary (19 KiB).

Beside the ids, every token carries `log_mass`: the log of the probability, under the tempered
distribution over the whole vocabulary, of what its sampler could pick (the kept set; with
`sampling.min_tokens`, less the stop tokens). The generator reports each token's log-probability
over what was kept (vLLM's processed logprobs); adding `log_mass` gives it over the whole
vocabulary, which is what the trainer compares with where a token has no set, and what a teacher
or a reference is compared with (`whole_logprobs`). 0 where nothing was cut (and for an
environment's tokens).
"""

from dataclasses import dataclass

import numpy as np


@dataclass
class KeptSets:
    """Per token of a completion, the ids its sampler kept."""

    ids: np.ndarray  # int32 [sum of sizes]: every token's set, in token order, ascending within a set
    sizes: np.ndarray  # int32 [tokens]: each token's set size; 0 = no set (the whole vocabulary)
    log_mass: np.ndarray  # float32 [tokens]: log of the whole-vocabulary probability of what was kept; <= 0
    over_cap: int = 0  # tokens whose set exceeded the cap, recorded with no set
    missing: int = 0  # sampled tokens the sampler had no row for (greedy steps), recorded with nothing cut

    def __post_init__(self) -> None:
        if int(self.sizes.sum()) != len(self.ids):
            raise ValueError(f"kept sets: sizes add up to {int(self.sizes.sum())} ids, {len(self.ids)} given")
        if len(self.log_mass) != len(self.sizes):
            raise ValueError(f"kept sets: {len(self.sizes)} tokens but {len(self.log_mass)} log masses")

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.sizes.nbytes

    @staticmethod
    def of(
        sets: "list[np.ndarray | None]", log_mass: "list[float] | None" = None, over_cap: int = 0, missing: int = 0
    ) -> "KeptSets":
        """From one array of ids (or None: no set) per token, and each token's log kept mass (None: 0s)."""
        sizes = np.fromiter((0 if s is None else len(s) for s in sets), dtype=np.int32, count=len(sets))
        present = [s for s in sets if s is not None]
        ids = np.concatenate(present).astype(np.int32, copy=False) if present else np.empty(0, np.int32)
        mass = np.zeros(len(sets), np.float32) if log_mass is None else np.asarray(log_mass, np.float32)
        return KeptSets(ids, sizes, mass, over_cap, missing)

    @staticmethod
    def none(tokens: int) -> "KeptSets":
        """`tokens` tokens with no set and nothing cut (an environment's observation)."""
        return KeptSets(np.empty(0, np.int32), np.zeros(tokens, np.int32), np.zeros(tokens, np.float32))

    @staticmethod
    def joined(parts: "list[KeptSets]") -> "KeptSets":
        """The sets of consecutive stretches of tokens (a multi-turn episode's turns and observations)."""
        return KeptSets(
            np.concatenate([p.ids for p in parts]) if parts else np.empty(0, np.int32),
            np.concatenate([p.sizes for p in parts]) if parts else np.empty(0, np.int32),
            np.concatenate([p.log_mass for p in parts]) if parts else np.empty(0, np.float32),
            sum(p.over_cap for p in parts),
            sum(p.missing for p in parts),
        )

    @property
    def records_ids(self) -> bool:
        """Whether any token has a set (or would have had one, but for the cap)."""
        return bool(len(self.ids)) or self.over_cap > 0

    def holds(self, token_ids: list[int]) -> bool:
        """Whether each token with a set is in its own set (the sampler never picks outside it).
        Vectorised: it runs on every completion a generator finishes."""
        has = self.sizes > 0
        if not has.any():
            return True
        hits = self.ids == np.repeat(np.asarray(token_ids, dtype=np.int64), self.sizes)
        starts = np.cumsum(self.sizes) - self.sizes
        return bool(np.add.reduceat(hits, starts[has]).all())
