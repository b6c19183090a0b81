"""Episodes with several seats (`env.seats`): each turn is taken by the seat the environment names,
played by the policy being trained, by a frozen snapshot of it, or by a scripted player.

    env.seats=[policy,policy]            self-play: both seats the policy
    env.seats=[policy,snapshot]          against the policy of a few steps ago (env.snapshot.*,
                                         its own generators: handles/generators/snapshot.py)
    env.seats=[policy,rival]             against a second policy trained in the same run (rival.*,
                                         its own trainer, generators and buffer: handles/rival.py)
    env.seats=[policy,random]            against a random player: one of the turn's moves, when the
                                         environment lists them, else a move its observations show
    env.seats=[policy,mymodule:player]   against `player(observations: list[str], seat: int) -> str`,
                                         given what its seat has seen so far, oldest first
    env.seats=[policy,forge_async.envs.players:tictactoe]   a TicTacToe player that wins and blocks

Each policy seat has a transcript of its own: the observations the environment gave that seat
(its first one is the completion's prompt) and its own turns, each sampled with that transcript as
the prompt, as one-seat episodes are (envs/runner.py). When the episode ends, every policy seat
that took a turn gives one completion, rewarded with its seat's reward; the rollouts group them
by seat, so advantages compare a seat's episodes with that seat's (rollout/multi_turn.py).
Scripted turns are the environment's business: nothing of them is trained. A snapshot seat
plays as a policy seat does (a transcript of its own, the run's sampling, its turns sampled on the
snapshot's generators, each token tagged with the snapshot's version) and gives no completion:
its turns and rewards are only counted (`metrics`). A rival seat plays as a policy seat does, its
turns sampled on the rival's generators, and gives a completion as a policy seat does, which the
rollouts hand to the rival's buffer (rollout/multi_turn.py); admission control counts policy seats only.

Limits are per model seat (policy, snapshot or rival): `env.max_turns` of its turns, `env.max_episode_tokens` of its
transcript; and all seats together take at most `env.max_turns` turns each. An episode that
reaches one ends, its game unfinished (rewards 0). A scripted player
that raises, returns no text, or (async) takes longer than `env.timeout_s` drops its episode
(`scripted_player_error`, `scripted_player_timeout`).
"""

import asyncio
import inspect
import random
import re
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from forge_async.config.callables import load_callable
from forge_async.data.episode import Completion
from forge_async.envs.environment import ModelTurn, Observation, SeatTurn
from forge_async.envs.runner import EnvRunner, EpisodeDropped, GenerateOne, Transcript, checked_step
from forge_async.errors import ConfigError
from forge_async.generation.config import SamplingConfig
from forge_async.tasks.task import Prompt

POLICY = "policy"  # the seat is the policy being trained
SNAPSHOT = "snapshot"  # the policy as it was some steps ago, never trained (env.snapshot.*)
RIVAL = "rival"  # a second policy, trained in the same run by a trainer of its own (rival.*)
MODEL_SEATS = (POLICY, SNAPSHOT, RIVAL)  # seats whose turns a model samples
RANDOM = "random"  # a random move among those its observations show
# (the seat's observations so far, as text, oldest first; the seat) -> the turn's text
Player = Callable[[list[str], int], "str | Awaitable[str]"]
_SHOWN_MOVE = re.compile(r"\[[^\[\]\n]{1,12}\]")


def check_seats(seats: list[str], key: str = "env.seats") -> None:
    """One ConfigError naming the entry, before any proc starts: each seat `policy`, `random` or a
    `module:function` that imports; at least one `policy`."""
    if not seats:
        return
    if POLICY not in seats:
        raise ConfigError(f"{key}={list(seats)}: no seat is the policy; name at least one `{POLICY}`")
    for seat, name in enumerate(seats):
        if name not in (*MODEL_SEATS, RANDOM):
            scripted_player(name, seat, key)


def scripted_player(name: str, seat: int, key: str = "env.seats") -> Player:
    """The `module:function` of a scripted seat."""
    if ":" not in name:
        raise ConfigError(
            f"{key}[{seat}]={name!r}: `{POLICY}`, `{SNAPSHOT}`, `{RIVAL}`, `{RANDOM}` or a `module:function`"
        )
    return load_callable(name, f"{key}[{seat}]")


def shown_moves(text: str) -> list[str]:
    """The moves a game's text shows, bracketed as games take them: `[4]`, `[bet]`, `[A C]`."""
    return _SHOWN_MOVE.findall(text)


def random_move(observations: list[str], rng: random.Random) -> str:
    """A move the seat's latest observation that shows any (bracketed, `[4]`, `[bet]`) shows."""
    for text in reversed(observations):
        shown = shown_moves(text)
        if shown:
            return rng.choice(shown)
    return "[0]"


class ModelPlayer(Protocol):
    """A model that plays seats on generators of its own: the snapshot seats'
    (handles/generators/snapshot.py: Snapshot) or the rival seats' (handles/rival.py: Rival)."""

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One turn, sampled on its generators."""
        ...

    def metrics(self) -> dict[str, float]:
        """Its figures: a snapshot's version, lag and refreshes; a rival's version, samples and rewards."""
        ...


@dataclass
class SnapshotTally:
    """Snapshot seats' turns and games since the last `SeatRunner.metrics`."""

    turns: int = 0
    tokens: int = 0
    versions: set[int] = field(default_factory=set)  # the versions their tokens carry
    rewards: dict[int, list[float]] = field(default_factory=dict)  # seat -> its games' rewards

    def figures(self) -> dict[str, float]:
        figures: dict[str, float] = {"snapshot/turns": self.turns, "snapshot/tokens": self.tokens}
        if self.versions:
            figures["snapshot/turn_version_min"] = min(self.versions)
            figures["snapshot/turn_version_max"] = max(self.versions)
        for seat, rewards in sorted(self.rewards.items()):  # apart from reward/seat_<i>: the trained seats'
            figures[f"snapshot/seat_{seat}_reward"] = sum(rewards) / len(rewards)
            figures[f"snapshot/seat_{seat}_won_frac"] = sum(r > 0 for r in rewards) / len(rewards)
        return figures


@dataclass
class _Seat:
    """One seat of an episode: a policy seat's transcript, or a scripted seat's observations."""

    index: int
    first: list[int] | None = None  # a policy seat's first observation: its completion's prompt
    transcript: Transcript = field(default_factory=Transcript)
    texts: list[str] = field(default_factory=list)  # a scripted seat's observations, as text
    turns: int = 0


class SeatRunner:
    """Plays multi-seat episodes with `runner`'s environments, limits and timeouts."""

    def __init__(
        self,
        runner: EnvRunner,
        seats: list[str],
        snapshot: ModelPlayer | None = None,
        rival: ModelPlayer | None = None,
    ):
        """`snapshot`, `rival`: play the `snapshot` and `rival` seats (needed if there are any)."""
        for name, player in ((SNAPSHOT, snapshot), (RIVAL, rival)):
            if name in seats and player is None:
                raise ConfigError(f"seats {list(seats)}: a `{name}` seat needs the {name}'s generators")
        self.runner = runner
        self.seats = list(seats)
        self.snapshot = snapshot
        self.rival = rival
        self.rival_seats = [i for i, name in enumerate(seats) if name == RIVAL]
        self.tally = SnapshotTally()
        scripted = [i for i, name in enumerate(seats) if name not in (*MODEL_SEATS, RANDOM)]
        self.players = {i: scripted_player(seats[i], i) for i in scripted}
        self.turn_batch_wait_s = runner.turn_batch_wait_s
        self.policy_seats = sum(name == POLICY for name in seats)

    async def play(
        self, prompt: Prompt, generate: GenerateOne, sampling: SamplingConfig | None = None
    ) -> list[Completion]:
        """One episode from `prompt`: a completion for each policy seat that took a turn."""
        async with self.runner.open_episode() as env:
            return await self._play(env, prompt, generate, sampling or self.runner.sampling)

    async def _play(self, env, prompt: Prompt, generate: GenerateOne, sampling: SamplingConfig) -> list[Completion]:
        seats = [_Seat(i) for i in range(len(self.seats))]
        rng = random.Random(zlib.crc32(repr((prompt.token_ids, prompt.text)).encode()))
        turn = self._seat_turn(await self._reset(env, prompt))
        rewards: dict[int, float] = {}
        finish = "done"
        while True:
            seat = seats[turn.seat]
            if self.seats[seat.index] in MODEL_SEATS:
                played = await self._model_turn(seat, turn.observation, generate, sampling)
                if played is None:
                    finish = "max_episode_tokens"
                    break
            else:
                played = await self._scripted_turn(seat, turn, rng)
            seat.turns += 1
            step = checked_step(await self.runner._call(env.step, played))
            if step.done:
                rewards = {int(seat): float(r) for seat, r in (step.rewards or {}).items()}  # checked_step's
                break
            if self._at_turn_limit(seat, seats):
                finish = "max_turns"
                break
            turn = self._seat_turn(SeatTurn(step.seat, step.observation, step.moves) if step.seat is not None else step)
        self._count_snapshot_games(seats, rewards)
        trained = [s for s in seats if self.seats[s.index] in (POLICY, RIVAL) and s.first is not None and s.turns]
        return [self._completion(seat, rewards, finish) for seat in trained]

    def _at_turn_limit(self, seat: _Seat, seats: list[_Seat]) -> bool:
        """A policy seat has taken env.max_turns turns, or the seats all together as many as every
        seat's share (an environment that asks only its scripted seats ends too)."""
        limit = self.runner.limits.max_turns
        model_seat_done = self.seats[seat.index] in MODEL_SEATS and seat.turns == limit
        all_seats_done = sum(s.turns for s in seats) >= limit * len(seats)
        return model_seat_done or all_seats_done

    async def _reset(self, env, prompt: Prompt):
        try:
            return await self.runner._call(env.reset, prompt)
        except EpisodeDropped as drop:
            drop.started = False
            raise

    def _seat_turn(self, turn) -> SeatTurn:
        """A SeatTurn naming one of the seats, or the episode drops (env_error)."""
        if not isinstance(turn, SeatTurn) or not isinstance(turn.seat, int) or not 0 <= turn.seat < len(self.seats):
            what = turn if isinstance(turn, SeatTurn) else f"{type(turn).__name__} {turn!r}"[:200]
            raise EpisodeDropped(
                "env_error", f"a multi-seat environment must name the next of its {len(self.seats)} seats; got {what}"
            )
        return turn

    async def _model_turn(
        self, seat: _Seat, observation: Observation | None, generate: GenerateOne, sampling: SamplingConfig
    ) -> ModelTurn | None:
        """The policy's turn at `seat` (or the snapshot's or rival's, with the run's sampling), its
        observation added to the seat's transcript first; None when the transcript has no room left."""
        runner = self.runner
        player = {SNAPSHOT: self.snapshot, RIVAL: self.rival}.get(self.seats[seat.index])
        if player is not None:  # its own generators, the run's sampling
            generate, sampling = player.turn, runner.sampling
        if seat.first is None:
            seat.first = runner._first_observation_ids(observation)
        else:
            ids = runner._observation_ids(observation)
            if runner._turn_budget(len(seat.first), len(seat.transcript.token_ids) + len(ids)) < 1:
                return None
            seat.transcript.add_observation(ids)
        budget = runner._turn_budget(len(seat.first), len(seat.transcript.token_ids))
        if budget < 1:
            return None
        turn_sampling = replace(sampling, max_tokens=budget, min_tokens=min(sampling.min_tokens, budget))
        completion = await generate(seat.first + seat.transcript.token_ids, turn_sampling)
        seat.transcript.add_turn(completion)
        if self.seats[seat.index] == SNAPSHOT:
            self.tally.turns += 1
            self.tally.tokens += len(completion.token_ids)
            self.tally.versions.update(completion.versions)
        return ModelTurn(completion.text, completion.token_ids, completion.finish_reason, seat.turns)

    async def _scripted_turn(self, seat: _Seat, turn: SeatTurn, rng: random.Random) -> ModelTurn:
        observation = turn.observation
        text = observation if isinstance(observation, str) else self.runner.tokenizer.decode(observation)
        seat.texts.append(text)
        if self.seats[seat.index] == RANDOM:
            move = rng.choice(turn.moves) if turn.moves else random_move(seat.texts, rng)
        else:
            move = await self._scripted_move(self.players[seat.index], list(seat.texts), seat.index)
        return ModelTurn(move, [], "stop", seat.turns)

    async def _scripted_move(self, player: Player, observations: list[str], seat: int) -> str:
        name = self.seats[seat]
        try:
            if inspect.iscoroutinefunction(player):
                async with asyncio.timeout(self.runner.timeout_s):
                    move = await player(observations, seat)
            else:
                move = player(observations, seat)
        except TimeoutError as err:
            raise EpisodeDropped(
                "scripted_player_timeout", f"{name} took longer than env.timeout_s={self.runner.timeout_s}"
            ) from err
        except Exception as err:
            raise EpisodeDropped("scripted_player_error", f"{name} raised {type(err).__name__}: {err}") from err
        if not isinstance(move, str) or not move:
            raise EpisodeDropped("scripted_player_error", f"{name} returned {move!r}, not the text of a move")
        return move

    def _count_snapshot_games(self, seats: list[_Seat], rewards: dict[int, float]) -> None:
        for seat in seats:
            if self.seats[seat.index] == SNAPSHOT and seat.turns:
                self.tally.rewards.setdefault(seat.index, []).append(rewards.get(seat.index, 0.0))

    def metrics(self) -> dict[str, float]:
        """With a snapshot seat: the snapshot's version, lag and refreshes, and its seats' turns
        (the versions their tokens carry) and games (their seats' mean reward and won share) since
        the last call; with a rival seat, the rival's figures; nothing without either."""
        figures = {} if self.rival is None else self.rival.metrics()
        if self.snapshot is None:
            return figures
        tally, self.tally = self.tally, SnapshotTally()
        return {**figures, **self.snapshot.metrics(), **tally.figures()}

    def _completion(self, seat: _Seat, rewards: dict[int, float], finish: str) -> Completion:
        if seat.first is None:
            raise RuntimeError(f"seat {seat.index} took no model turn: it has no completion")
        t = seat.transcript
        return Completion(
            prompt_ids=seat.first,
            token_ids=t.token_ids,
            logprobs=t.logprobs,
            versions=t.versions,
            text=self.runner.tokenizer.decode(t.token_ids, skip_special_tokens=True),
            finish_reason=finish,
            turns=seat.turns,
            env_reward=rewards.get(seat.index, 0.0),
            routes=t.routes,
            kept_sets=t.joined_kept_sets(),
            seat=seat.index,
        )
