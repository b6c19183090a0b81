"""A frozen past self (env.seats' `snapshot`: envs/seats.py, handles/generators/snapshot.py): its
seats play with the snapshot's turns and give no completion, their turns and games counted apart;
bad snapshot plans fail at start naming the key; and a real two-player TextArena game against a
snapshot refreshed mid-run, whose tokens are never trained on."""

import json

import pytest

from forge_async.controller.config import GRPOConfig
from forge_async.data.episode import Completion
from forge_async.envs.config import EnvConfig, SnapshotConfig
from forge_async.envs.environment import EnvStep, ModelTurn
from forge_async.envs.seats import check_seats
from forge_async.errors import ConfigError
from forge_async.generation.config import SamplingConfig
from forge_async.mesh.config import PlacementConfig
from forge_async.weights.config import WeightsConfig
from tests.support.scripted import BYTES
from tests.support.seat_games import Moves, Relay, play, seat_runner

pytestmark = pytest.mark.unit


class SnapshotMoves(Moves):
    """The snapshot at its seats: says its scripted moves, each token tagged with `version`."""

    def __init__(self, moves: list[str], version: int):
        super().__init__(moves)
        self.version = version

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        completion = await self(prompt_ids, sampling)
        completion.versions = [self.version] * len(completion.token_ids)
        return completion

    def metrics(self) -> dict[str, float]:
        return {"snapshot/version": self.version}


def test_a_snapshot_seat_plays_its_own_transcript_and_gives_no_completion():
    snapshot = SnapshotMoves(["s1", "s2"], version=4)
    policy = Moves(["w", "w"])
    runner = seat_runner(Relay, ["policy", "snapshot"], snapshot=snapshot)
    (seat0,) = play(runner, policy)
    assert seat0.seat == 0 and seat0.env_reward == 1.0 and seat0.turns == 2
    # the snapshot saw seat 1's observations (the policy's moves), the policy its own seat's
    assert all("[w]" in BYTES.decode(p) for p in snapshot.prompts)
    assert "s1" in BYTES.decode(policy.prompts[1])
    assert 4 not in seat0.versions  # the policy's tokens and observations, none of the snapshot's
    figures = runner.metrics()
    assert figures == {
        "snapshot/version": 4,
        "snapshot/turns": 2,
        "snapshot/tokens": 6,
        "snapshot/turn_version_min": 4,
        "snapshot/turn_version_max": 4,
        "snapshot/seat_1_reward": -1.0,
        "snapshot/seat_1_won_frac": 0.0,
    }
    assert runner.metrics() == {"snapshot/version": 4, "snapshot/turns": 0, "snapshot/tokens": 0}  # since the last
    assert seat_runner(Relay, ["policy", "random"]).metrics() == {}


def test_a_snapshot_seat_has_the_limits_of_a_model_seat():
    snapshot = SnapshotMoves(["s"] * 8, version=0)
    runner = seat_runner(lambda: Relay(moves=20), ["snapshot", "policy"], max_turns=2, snapshot=snapshot)
    (seat1,) = play(runner, Moves(["a"] * 8))
    assert (seat1.seat, seat1.turns, seat1.finish_reason) == (1, 1, "max_turns")  # the snapshot's 2nd turn ends it
    assert runner.metrics()["snapshot/turns"] == 2


def test_bad_snapshot_plans_fail_at_start_naming_the_key():
    check_seats(["policy", "snapshot"])
    with pytest.raises(ConfigError, match="no seat is the policy"):
        check_seats(["snapshot", "snapshot"])
    with pytest.raises(ConfigError, match="needs the snapshot's generators"):
        seat_runner(Relay, ["policy", "snapshot"])
    with pytest.raises(ConfigError, match="env.snapshot.refresh_steps=0"):
        SnapshotConfig(refresh_steps=0)
    with pytest.raises(ConfigError, match="env.snapshot.generators=0"):
        SnapshotConfig(generators=0)
    with pytest.raises(ConfigError, match=r"env.snapshot.lag=5: must be in \[0, 4\] \(env.snapshot.refresh_steps=4\)"):
        SnapshotConfig(refresh_steps=4, lag=5)
    seats = EnvConfig(name="x:y", seats=["policy", "snapshot"])
    with pytest.raises(
        ConfigError, match="weights.transport=torchstore: a `snapshot` seat .* use weights.transport=shm"
    ):
        GRPOConfig(env=seats, weights=WeightsConfig(transport="torchstore"))
    # the snapshot's generator comes after generator.count=1: the second generator host, not the trainer's
    two_nodes = PlacementConfig(trainer_hosts=[0], generator_hosts=[0, 1])
    with pytest.raises(ConfigError, match=r"env.snapshot.generators=1: .* on node\(s\) \[1\]"):
        GRPOConfig(env=seats, placement=two_nodes)
    GRPOConfig(env=EnvConfig(name="x:y", seats=["policy", "policy"]), weights=WeightsConfig(transport="torchstore"))


def test_turns_of_several_snapshot_seats_are_counted_together():
    class ThreeSeats(Relay):
        seats = 3

        def step(self, turn: ModelTurn) -> EnvStep:
            self.played.append(turn.text)
            if len(self.played) == 3:
                return EnvStep(done=True, rewards={0: 1.0, 1: 0.0, 2: 1.0})
            return EnvStep(observation=f"[{turn.text}]", seat=len(self.played))

    snapshot = SnapshotMoves(["a", "b"], version=2)
    runner = seat_runner(ThreeSeats, ["policy", "snapshot", "snapshot"], snapshot=snapshot)
    (seat0,) = play(runner, Moves(["p"]))
    figures = runner.metrics()
    assert seat0.env_reward == 1.0 and figures["snapshot/turns"] == 2
    assert (figures["snapshot/seat_1_won_frac"], figures["snapshot/seat_2_won_frac"]) == (0.0, 1.0)


@pytest.mark.e2e
def test_grpo_plays_a_textarena_game_against_a_snapshot_refreshed_mid_run(tmp_path):
    """Five steps of IteratedPrisonersDilemma-v0 (one round: a free message, then a decision; every
    turn is valid, so the snapshot's seat always plays, which TicTacToe's untrained first moves
    rarely let it) against the snapshot, refreshed every two steps to the version one step before,
    its games on a proc of their own. The snapshot holds version 0, then 1, then 3, and its turns'
    tokens carry those versions only; no seat-1 completion is trained (the batch's seat figures
    are seat 0's) and the accounting adds up with one sample an episode."""
    from tests.support.app_runs import assert_accounting
    from forge_async.cli.subprocess_run import run_app

    run = run_app(
        tmp_path / "run",
        "--config-name=dilemma",
        "env.seats=[policy,snapshot]",
        "env.snapshot.refresh_steps=2",
        "env.snapshot.lag=1",
        "steps=5",
        "prompts_per_step=4",
        "group_size=4",
        "prompts_per_rollout=4",
        "eval.every_steps=0",
        timeout=600,
    )
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    rows = run.metrics
    assert all(m["samples/trained"] == 16 * (i + 1) for i, m in enumerate(rows))
    assert not any("reward/seat_1" in m for m in rows)  # the batch's seats: the policy's only
    held = [m["snapshot/version"] for m in rows]
    assert held == sorted(held) and set(held) <= {0, 1, 3} and held[0] == 0 and held[-1] >= 1, held
    assert [m["snapshot/refreshes"] for m in rows] == [sorted(set(held)).index(v) for v in held]
    assert all(1 <= m["snapshot/lag"] <= 3 for m in rows)
    assert all(m["snapshot/refresh_bytes"] > 0 for m in rows if m["snapshot/refreshes"])
    played = [m for m in rows if m["snapshot/turns"]]
    assert sum(m["snapshot/turns"] for m in rows) >= 16 and played
    turn_versions = {m[f"snapshot/turn_version_{end}"] for m in played for end in ("min", "max")}
    assert turn_versions <= {0, 1, 3}, turn_versions
    assert run.summary["placement"]["snapshot_generators"] == [0]
    events = json.loads((run.run_dir / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "generator 1" in tracks  # the snapshot's generator's spans beside the policy's
    assert all(0 <= m["snapshot/seat_1_won_frac"] <= 1 for m in rows if "snapshot/seat_1_won_frac" in m)


def test_the_selfplay_snapshot_preset_plays_nim_against_a_lagged_snapshot():
    from tests.support.app_config import app_config

    config = app_config(config_name="selfplay_snapshot")
    assert config.env.name == "nim" and config.env.seats == ["policy", "snapshot"]
    assert config.env.snapshot.refresh_steps == 10 and config.eval.seats == ["policy", "random"]
    config.check_paths()
