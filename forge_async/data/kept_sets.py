"""The tokens the sampler kept for each sampled token (top-k / top-p / min-p), for the trainer to
compute its log-probabilities over the same sets ("keep sampling mask").

A generator that samples from a truncated distribution records, at every step, which token ids
survived the truncation (generation/kept_set_capture.py). The trainer masks every other logit
before its softmax (losses/sliced_softmax.py), so its log-probabilities, the importance ratios
built on them and the entropy are those of the distribution the generator really sampled.

Stored compactly: the ids of every token's set one after the other (int32, ascending within a
set) and each token's set size. Size 0 means no set: an environment's token, a greedy step, or
a set larger than `sampling.kept_set_cap` (counted in `over_cap`); the trainer uses the whole
vocabulary there. A set of up to the cap's ids takes 4 bytes an id: at the default cap of 1,024,
at most 4 KiB a token, less than a bitmask of a 151,936-token vocabulary (19 KiB).
"""

from dataclasses import dataclass

import numpy as np


@dataclass
class KeptSets:
    """Per token of a completion, the ids its sampler kept."""

    ids: np.ndarray  # int32 [sum of sizes]: every token's set, in token order, ascending within a set
    sizes: np.ndarray  # int32 [tokens]: each token's set size; 0 = no set (the whole vocabulary)
    over_cap: int = 0  # tokens whose set exceeded the cap, recorded with no set

    def __post_init__(self) -> None:
        if int(self.sizes.sum()) != len(self.ids):
            raise ValueError(f"kept sets: sizes add up to {int(self.sizes.sum())} ids, {len(self.ids)} given")

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.sizes.nbytes

    @staticmethod
    def of(sets: "list[np.ndarray | None]", over_cap: int = 0) -> "KeptSets":
        """From one array of ids (or None: no set) per token."""
        sizes = np.fromiter((0 if s is None else len(s) for s in sets), dtype=np.int32, count=len(sets))
        present = [s for s in sets if s is not None]
        ids = np.concatenate(present).astype(np.int32, copy=False) if present else np.empty(0, np.int32)
        return KeptSets(ids, sizes, over_cap)

    @staticmethod
    def none(tokens: int) -> "KeptSets":
        """`tokens` tokens with no set (an environment's observation)."""
        return KeptSets(np.empty(0, np.int32), np.zeros(tokens, np.int32))

    @staticmethod
    def joined(parts: "list[KeptSets]") -> "KeptSets":
        """The sets of consecutive stretches of tokens (a multi-turn episode's turns and observations)."""
        return KeptSets(
            np.concatenate([p.ids for p in parts]) if parts else np.empty(0, np.int32),
            np.concatenate([p.sizes for p in parts]) if parts else np.empty(0, np.int32),
            sum(p.over_cap for p in parts),
        )

    def holds(self, token_ids: list[int]) -> bool:
        """Whether each token with a set is in its own set (the sampler never picks outside it).
        Vectorised: it runs on every completion a generator finishes."""
        has = self.sizes > 0
        if not has.any():
            return True
        hits = self.ids == np.repeat(np.asarray(token_ids, dtype=np.int64), self.sizes)
        starts = np.cumsum(self.sizes) - self.sizes
        return bool(np.add.reduceat(hits, starts[has]).all())
