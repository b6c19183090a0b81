"""A second trained policy (env.seats' `rival`: envs/seats.py, handles/rival.py): its seats play
on its own generators and give completions that go to its own buffer and trainer, never the
policy's; bad rival plans fail at start naming the key; and a real run of Nim between two tiny
digits models, each trained by its own trainer."""

import json

import pytest

from forge_async.controller.config import GRPOConfig
from forge_async.envs.config import EnvConfig
from forge_async.envs.seats import check_seats
from forge_async.errors import ConfigError
from forge_async.evaluation.config import EvalConfig
from forge_async.learning.rival_config import RivalConfig
from forge_async.mesh.config import PlacementConfig
from forge_async.models.config import LoraConfig, ModelConfig
from forge_async.scoring.config import ScorerConfig
from forge_async.weights.config import WeightsConfig
from tests.support.seat_games import Moves, Relay, play, seat_runner

pytestmark = pytest.mark.unit

AGAINST_RANDOM = EvalConfig(seats=["policy", "random"])


class RivalMoves(Moves):
    """The rival at its seats: says its scripted moves."""

    async def turn(self, prompt_ids, sampling):
        return await self(prompt_ids, sampling)

    def metrics(self) -> dict[str, float]:
        return {"rival/version": 0}


def test_a_rival_seat_plays_its_own_turns_and_gives_a_completion_of_its_seat():
    rival = RivalMoves(["r1", "r2"])
    policy = Moves(["w", "w"])
    runner = seat_runner(Relay, ["policy", "rival"], rival=rival)
    seat0, seat1 = sorted(play(runner, policy), key=lambda c: c.seat)
    assert (seat0.seat, seat0.env_reward, seat0.turns) == (0, 1.0, 2)
    assert (seat1.seat, seat1.env_reward, seat1.turns) == (1, -1.0, 2)
    assert "r1" in seat1.text and "r2" in seat1.text  # the rival's turns, sampled on its generators
    assert len(rival.prompts) == 2 and len(policy.prompts) == 2
    assert runner.rival_seats == [1] and runner.policy_seats == 1  # admission counts the policy's seat
    assert runner.metrics() == {"rival/version": 0}


def test_bad_rival_plans_fail_at_start_naming_the_key():
    with pytest.raises(ConfigError, match="needs the rival's generators"):
        seat_runner(Relay, ["policy", "rival"])
    with pytest.raises(ConfigError, match="no seat is the policy"):
        check_seats(["rival", "rival"])
    seats = EnvConfig(name="nim", seats=["policy", "rival"])
    with pytest.raises(ConfigError, match=r"eval.seats=\[\]: a `rival` seat .* eval.seats=\[policy,random\]"):
        GRPOConfig(env=seats)
    with pytest.raises(ConfigError, match=r"eval.seats=\['policy', 'rival'\]"):
        GRPOConfig(env=seats, eval=EvalConfig(seats=["policy", "rival"]))
    with pytest.raises(ConfigError, match="weights.transport=torchstore: a `rival` seat .* use weights.transport=shm"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, weights=WeightsConfig(transport="torchstore"))
    two_nodes = PlacementConfig(trainer_hosts=[0], generator_hosts=[0, 1])
    with pytest.raises(ConfigError, match=r"rival.generators=1: .* on node\(s\) \[1\]"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, placement=two_nodes)
    with pytest.raises(ConfigError, match="model.lora.rank=4: a `rival` seat"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, model=ModelConfig(lora=LoraConfig(rank=4)))
    with pytest.raises(ConfigError, match="resume=somewhere: a `rival` seat"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, resume="somewhere")
    with pytest.raises(ConfigError, match=r"scorers\[1\].kind=reference_kl: a `rival` seat"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, scorers=[ScorerConfig(), ScorerConfig(kind="reference_kl")])
    with pytest.raises(ConfigError, match="rival.path: checkpoint directory not found: /nowhere"):
        GRPOConfig(env=seats, eval=AGAINST_RANDOM, rival=RivalConfig(path="/nowhere")).check_paths()
    with pytest.raises(ConfigError, match="rival.generators=0"):
        RivalConfig(generators=0)
    with pytest.raises(ConfigError, match="rival.lr=0"):
        RivalConfig(lr=0)
    GRPOConfig(env=seats, eval=AGAINST_RANDOM)  # the reference KL in the trainer is the rival's own


@pytest.mark.e2e
def test_two_policies_train_on_their_own_seats_of_nim(tmp_path):
    """Four steps of Nim, the policy at seat 0 and the rival (another tiny digits model) at seat 1,
    the games on a proc of their own. Each batch the policy's trainer takes holds seat-0 samples only;
    each the rival's trainer takes, seat-1 samples only; both trainers' versions advance; the samples
    of each policy add up."""
    from forge_async.cli.subprocess_run import run_app
    from tests.support.app_runs import assert_accounting

    run = run_app(
        tmp_path / "run",
        "--config-name=selfplay_nim",
        "env.seats=[policy,rival]",
        "rival.lr=0.002",
        "env.procs=1",
        "steps=4",
        "prompts_per_step=4",
        "group_size=4",
        "prompts_per_rollout=4",
        "eval.every_steps=0",
        timeout=900,
    )
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    rows = run.metrics
    assert [m["samples/trained"] for m in rows] == [16, 32, 48, 64]
    assert not any(key.startswith("reward/seat_1") for m in rows for key in m)  # the policy's batches: seat 0
    last = rows[-1]
    assert last["rival/version"] >= 1 and last["rival/trained"] == 16 * last["rival/version"]
    trained_seats = {key for key in last if key.startswith("rival/trained_seat_")}
    assert trained_seats == {"rival/trained_seat_1"} and last["rival/trained_seat_1"] == last["rival/trained"]
    rival = run.summary["rival"]
    assert rival["accounting_ok"] is True and rival["version"] >= last["rival/version"]
    parts = ("trained", "dropped_stale", "dropped_other", "left_in_buffer", "in_step")
    assert rival["generated"] == sum(rival[p] for p in parts) > 0
    assert "rival: version" in run.output and "adds up" in run.output
    assert "rival_trainer" in json.loads((run.run_dir / "procs.json").read_text())
