"""Rollouts of multi-turn episodes: each group is played, scored and buffered on its own.

A rollout worker (worker.py) keeps up to `prompts_per_rollout` groups in flight. Every group
plays its `group_size` episodes concurrently (envs/runner.py); the moment its last
episode ends, the group is scored and goes to the buffer, and the worker admits a
new group in its place. A slow group holds up nothing but itself: no call-sized
batch waits for its longest episode. What stragglers cost is measured per group:
the time its episodes that ended first (trained or dropped) waited for its last one,
and the spread of their lengths (`rollout/straggler_wait_ms` and its max, `rollout/length_spread`).

With `rival` seats (env.seats), a group's rival seats' completions are scored apart and go to the
rival's loop (`rival`: controller/rival_loop.py), with the rival samples of its dropped episodes; the group's
episodes, drops and tokens that the run's buffer and admission control see are the policy's only.
"""

import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from forge_async.data.buffer import DropCounts
from forge_async.data.episode import Completion, Episode
from forge_async.tasks.task import Prompt
from forge_async.envs.runner import EnvRunner, EpisodeDropped
from forge_async.envs.seats import SeatRunner
from forge_async.rollout.single_turn import Rollouts
from forge_async.envs.turn_batcher import TurnBatcher
from forge_async.rollout.types import Generator, Producer, WorkerShape


class RivalSink(Protocol):
    def add(self, episodes: list[Episode], dropped: DropCounts) -> None:
        """A group's rival seats' scored episodes, and their samples dropped on the way by reason."""
        ...


@dataclass(frozen=True)
class RivalSeats:
    """Where the rival seats' completions go (controller/rival_loop.py), and which seats are its."""

    sink: RivalSink
    seats: frozenset[int]


class EpisodeRollouts(Rollouts):
    def __init__(
        self,
        runner: EnvRunner | SeatRunner,
        *args,
        seat_baseline: str = "seat",
        rival: RivalSeats | None = None,
        **kwargs,
    ):
        """`runner` plays each episode; `seat_baseline` (env.seat_baseline): `game` judges the
        policy's seats' completions of a group together, `seat` each seat's apart; `rival`: the
        rival seats' completions go there; the rest as Rollouts' arguments, where
        `prompts_per_rollout` is the groups a rollout worker keeps in flight, each on its own (and
        the groups of one sync-mode call)."""
        super().__init__(*args, **kwargs)
        self.runner = runner
        self.seat_baseline = seat_baseline
        # the samples one episode gives: its policy seats (env.seats), each its own completion
        self.samples_per_episode = runner.policy_seats
        self.shape = WorkerShape(
            1, calls_in_flight=self.prompts_per_rollout, samples_per_episode=self.samples_per_episode
        )
        self.ended: Counter[str] = Counter()  # episodes by how they ended (finish_reason)
        self.rival = rival
        self.rival_seats = rival.seats if rival is not None else frozenset()
        self._straggler_waits_s: list[float] = []  # per group, since the last metrics()
        self._length_spreads: list[int] = []

    def for_worker(self) -> Producer:
        """What one rollout worker produces with: its groups' turns on one generator go out together."""
        return WorkerEpisodes(self)

    async def produce(self, generator: Generator, num_prompts: int) -> tuple[list[Episode], DropCounts]:
        """`num_prompts` groups played at once, scored, with the samples dropped on the way by reason."""
        return await self._play_groups(TurnBatcher(generator.generate, self.runner.turn_batch_wait_s), num_prompts)

    async def _play_groups(self, generate_one: TurnBatcher, num_prompts: int) -> tuple[list[Episode], DropCounts]:
        prompts = [self.task.sample(self.rng) for _ in range(num_prompts)]
        results = await asyncio.gather(*(self._play_group(generate_one, p) for p in prompts))
        dropped = sum((group_dropped for _, group_dropped in results), DropCounts())
        return [e for episodes, _ in results for e in episodes], dropped

    async def _play_group(self, generate_one: TurnBatcher, prompt: Prompt) -> tuple[list[Episode], DropCounts]:
        ended_at: list[float] = []

        async def play() -> list[Completion] | EpisodeDropped:
            try:
                played = await generate_one.play(self.runner, prompt)
            except EpisodeDropped as drop:
                return drop
            finally:
                ended_at.append(time.perf_counter())
            played = played if isinstance(played, list) else [played]
            self.ended[played[0].finish_reason if played else "done"] += 1
            for completion in played:
                self.tokens += 0 if completion.seat in self.rival_seats else completion.model_tokens
            return played

        outcomes = await asyncio.gather(*(play() for _ in range(self.group_size)))
        completions = [c for o in outcomes if isinstance(o, list) for c in o]
        drops = [o for o in outcomes if isinstance(o, EpisodeDropped)]
        samples = self.samples_per_episode
        dropped = Counter({reason: n * samples for reason, n in Counter(drop.reason for drop in drops).items()})
        self._straggler_waits_s.append(max(ended_at) - min(ended_at))
        episodes: list[Episode] = []
        rivals: list[list[Completion]] = []
        if completions:
            lengths = [len(c.token_ids) for c in completions]
            self._length_spreads.append(max(lengths) - min(lengths))
            rivals = by_seat([c for c in completions if c.seat in self.rival_seats])
            groups = advantage_groups([c for c in completions if c.seat not in self.rival_seats], self.seat_baseline)
            if groups:
                episodes, unscored = await self._scored([prompt] * len(groups), groups)
                dropped.update(unscored.started)
        if self.rival is not None:
            await self._to_rival(self.rival.sink, prompt, rivals, drops)
        first_drops = {drop.reason: drop for drop in reversed(drops)}  # reversed: each reason's first wins
        self._watched(episodes, dropped, {reason: str(drop) for reason, drop in first_drops.items()})
        return episodes, _buffered(dropped, drops, samples)

    async def _to_rival(
        self, sink: RivalSink, prompt: Prompt, groups: list[list[Completion]], drops: list[EpisodeDropped]
    ) -> None:
        """The rival seats' completions of a group, scored, into the rival's buffer, with the rival
        samples of the group's dropped episodes (as `_buffered` counts the policy's)."""
        episodes, unscored = await self._scored([prompt] * len(groups), groups) if groups else ([], DropCounts())
        dropped = Counter({reason: n * len(self.rival_seats) for reason, n in Counter(d.reason for d in drops).items()})
        sink.add(episodes, _buffered(dropped + Counter(unscored.started), drops, len(self.rival_seats)))

    def metrics(self) -> dict[str, float]:
        """Straggler figures of the groups finished since the last call; episodes ended by a limit;
        a snapshot seat's figures (envs/seats.py)."""
        waits, spreads = self._straggler_waits_s, self._length_spreads
        self._straggler_waits_s, self._length_spreads = [], []
        figures: dict[str, float] = {
            f"episodes/ended_{reason}": self.ended[reason] for reason in ("max_turns", "max_episode_tokens")
        }
        figures.update(self.runner.metrics())
        if waits:
            figures["rollout/straggler_wait_ms"] = statistics.fmean(waits) * 1e3
            figures["rollout/straggler_wait_max_ms"] = max(waits) * 1e3
            figures["rollout/length_spread"] = statistics.fmean(spreads)
        return figures

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ended": dict(self.ended)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.ended = Counter(state["ended"])


class WorkerEpisodes:
    """A rollout worker's groups, one admitted at a time: the turns of those on one generator go
    out together (one TurnBatcher per generator, kept for the worker's life)."""

    def __init__(self, rollouts: EpisodeRollouts):
        self.rollouts = rollouts
        self._batchers: dict[Generator, TurnBatcher] = {}

    def batcher(self, generator: Generator) -> TurnBatcher:
        if generator not in self._batchers:
            self._batchers[generator] = TurnBatcher(generator.generate, self.rollouts.runner.turn_batch_wait_s)
        return self._batchers[generator]

    async def produce(self, generator: Generator, num_prompts: int) -> tuple[list[Episode], DropCounts]:
        return await self.rollouts._play_groups(self.batcher(generator), num_prompts)


def advantage_groups(completions: list[Completion], seat_baseline: str) -> list[list[Completion]]:
    """A group's completions of the trained policy as advantages compare them: each seat's with
    that seat's (`seat`), or all together (`game`); none: no group."""
    if seat_baseline == "game":
        return [completions] if completions else []
    return by_seat(completions)


def by_seat(completions: list[Completion]) -> list[list[Completion]]:
    """A group's completions, one list per seat (one list for one-seat episodes)."""
    seats: dict[int | None, list[Completion]] = {}
    for completion in completions:
        seats.setdefault(completion.seat, []).append(completion)
    return list(seats.values())


def _buffered(dropped: Counter[str], drops: list[EpisodeDropped], samples: int = 1) -> DropCounts:
    """A group's drops by reason as the buffer counts them (`samples` each: an episode's policy
    seats), those of episodes dropped before their first model turn as `not_started`, not counted
    as generated."""
    not_started: Counter[str] = Counter()
    for drop in drops:
        if not drop.started:
            not_started[drop.reason] += samples
    started = {reason: n - not_started[reason] for reason, n in dropped.items() if n > not_started[reason]}
    return DropCounts(started, dict(not_started))
