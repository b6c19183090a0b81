"""The roles of a run's procs: what each proc mesh is for, and its name.

A role is a kind and, for kinds that come several to a run, an index: the
generator's position, the model scorer's position in `scorers`, the environment
proc's position, or the node a weight relay serves. The weight sender runs on the
trainer's (first) node, and so does a rival's trainer. Its name (`generator3`,
`weight_relay1`) names the proc mesh, its log file and its entry in procs.json.
"""

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    TRAINER = "trainer"
    GENERATOR = "generator"
    REPLAY_BUFFER = "replay_buffer"
    WEIGHT_RELAY = "weight_relay"
    WEIGHT_SENDER = "weight_sender"
    SCORER = "scorer"
    ENVIRONMENT = "environment"
    RIVAL_TRAINER = "rival_trainer"  # a `rival` seat's policy's trainer (handles/rival.py)


@dataclass(frozen=True)
class Role:
    kind: Kind
    index: int | None = None

    @property
    def number(self) -> int:
        """Its index, for a kind that comes several to a run (a ValueError for the others)."""
        if self.index is None:
            raise ValueError(f"{self.kind.value}: one to a run, it has no index")
        return self.index

    def __str__(self) -> str:
        return self.kind.value if self.index is None else f"{self.kind.value}{self.index}"


TRAINER = Role(Kind.TRAINER)
REPLAY_BUFFER = Role(Kind.REPLAY_BUFFER)
WEIGHT_SENDER = Role(Kind.WEIGHT_SENDER)
RIVAL_TRAINER = Role(Kind.RIVAL_TRAINER)


def generator(index: int) -> Role:
    return Role(Kind.GENERATOR, index)


def weight_relay(node: int) -> Role:
    return Role(Kind.WEIGHT_RELAY, node)


def scorer(index: int) -> Role:
    return Role(Kind.SCORER, index)


def environment(index: int) -> Role:
    return Role(Kind.ENVIRONMENT, index)
