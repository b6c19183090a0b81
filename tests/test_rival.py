"""A second trained policy (env.seats' `rival`: envs/seats.py, handles/rival.py, controller/rival_loop.py): its seats play
on its own generators and give completions that go to its own buffer and trainer, never the
policy's; bad rival plans fail at start naming the key; and a real run of a TextArena game
between two tiny byte models, each trained by its own trainer."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from forge_async.controller.config import GRPOConfig
from forge_async.data.buffer import DropCounts
from forge_async.data.episode import Completion, Episode
from forge_async.envs.config import EnvConfig
from forge_async.envs.seats import check_seats
from forge_async.errors import ConfigError, TrainerFailed
from forge_async.controller.rival_loop import RivalLoop
from forge_async.learning.results import StepResult
from forge_async.evaluation.config import EvalConfig
from forge_async.learning.rival_config import RivalConfig
from forge_async.mesh.config import PlacementConfig
from forge_async.models.config import LoraConfig, ModelConfig
from forge_async.scoring.config import ScorerConfig
from forge_async.weights.config import WeightsConfig
from tests.support.seat_games import Moves, Relay, play, seat_runner

pytestmark = pytest.mark.unit

AGAINST_RANDOM = EvalConfig(seats=["policy", "random"])
SEATS = EnvConfig(name="nim", seats=["policy", "rival"])


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
def test_two_policies_train_on_their_own_seats_of_a_textarena_game(tmp_path):
    """Four steps of IteratedPrisonersDilemma-v0 as TextArena ships it (one round: a free message,
    then a decision; every turn is valid, so both seats play every game), the policy at seat 0 and
    the rival (another tiny byte model) at seat 1, the games on a proc of their own. Each batch the
    policy's trainer takes holds seat-0 samples only; each the rival's trainer takes, seat-1 samples
    only; both trainers' versions advance; the samples of each policy add up."""
    from forge_async.cli.subprocess_run import run_app
    from tests.support.app_runs import assert_accounting

    run = run_app(
        tmp_path / "run",
        "--config-name=dilemma",
        "env.seats=[policy,rival]",
        "eval.seats=[policy,random]",
        "rival.lr=0.002",
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
    assert set(run.summary["placement"]) == {"trainer", "generators", "rival_trainer", "rival_generators"}
    events = json.loads((run.run_dir / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert {"rival_trainer rank 0", "generator 1"} <= tracks  # its trainer's and generator's spans
    saved = run.run_dir / "rival_final_model"
    assert rival["final_model"] == str(saved) and (saved / "config.json").is_file()
    assert f"rival's policy: {saved}" in run.output


class Steps:
    """The rival's trainer as its loop sees it: each step a version more (or a failure)."""

    def __init__(self, fail: bool = False):
        self.version, self.batches, self.fail = 0, [], fail

    async def train_and_push(self, batch, targets):
        if self.fail:
            raise RuntimeError("out of memory")
        self.batches.append(batch)
        self.version += 1
        return StepResult(self.version, {}, 0.0, 0)


async def settled() -> None:
    """Until the learner has done what it can with what it holds (its steps here never wait)."""
    for _ in range(10):
        await asyncio.sleep(0)


class RivalProcs:
    """The rival's handle as its loop sees it: a trainer, turns that are never asked for here."""

    def __init__(self, trainer: "Steps"):
        self.trainer, self.final_model = trainer, None

    async def turn(self, prompt_ids, sampling):
        raise AssertionError("a failed learner is raised before the turn")


def rival_episode(version: int, reward: float = 1.0) -> Episode:
    completion = Completion([1], [2, 3], [-0.1, -0.1], [version, version], "x", "stop", env_reward=reward, seat=1)
    return Episode(completion, reward, 0.0)


def test_the_rival_learns_a_batch_at_a_time_dropping_stale_samples_and_accounts_for_them(tmp_path):
    async def run():
        config = GRPOConfig(env=SEATS, eval=AGAINST_RANDOM, prompts_per_step=1, group_size=2, prompts_per_rollout=1)
        config.max_policy_age = 0
        steps = Steps()
        rival = RivalLoop(RivalProcs(steps), config.plan().rival)
        rival.learn_beside()
        rival.add([rival_episode(0), rival_episode(0, -1.0)], DropCounts(started={"env_error": 1}))
        await settled()
        assert rival.version == 1 and len(steps.batches) == 1
        rival.add([rival_episode(0)], DropCounts())  # a version behind its trainer: stale at max_policy_age=0
        rival.add([rival_episode(1)], DropCounts())
        await settled()
        assert rival.version == 1  # one fresh sample: no batch yet
        figures = rival.metrics()
        assert figures["rival/dropped_stale"] == 1 and figures["rival/reward"] == 0.5
        rival.add([rival_episode(1)], DropCounts())
        await settled()
        assert rival.version == 2 and rival.metrics()["rival/trained_seat_1"] == 4
        return await rival.summary()

    summary = asyncio.run(run())
    assert summary == {
        "version": 2,
        "generated": 6,
        "trained": 4,
        "dropped_stale": 1,
        "dropped_other": 1,
        "dropped_by_reason": {"env_error": 1, "stale": 1},
        "left_in_buffer": 0,
        "in_step": 0,
        "final_model": None,
        "accounting_ok": True,
    }


def test_a_failed_rival_step_ends_the_run_at_its_next_turn(tmp_path):
    async def run():
        config = GRPOConfig(env=SEATS, eval=AGAINST_RANDOM, prompts_per_step=1, group_size=2, prompts_per_rollout=1)
        rival = RivalLoop(RivalProcs(Steps(fail=True)), config.plan().rival)
        rival.learn_beside()
        rival.add([rival_episode(0), rival_episode(0)], DropCounts())
        await settled()
        with pytest.raises(TrainerFailed, match="the rival's learner failed: RuntimeError: out of memory"):
            await rival.turn([1], None)
        await rival.close()

    asyncio.run(run())


@pytest.mark.unit
def test_a_run_with_a_rival_says_it_cannot_be_resumed_and_prints_no_resume_command(capsys):
    from forge_async.cli.report import report_early_end
    from forge_async.process.interpreter import module_command

    assert GRPOConfig().resumable
    assert not GRPOConfig(env=EnvConfig(name="nim", seats=["policy", "rival"]), eval=AGAINST_RANDOM).resumable
    ended = {"failure": "the rival's learner failed", "stop_reason": None, "cut_short": [], "run_dir": "RUN"}
    report_early_end(SimpleNamespace(**ended, resumable=False), "apps.grpo")  # the fields it reads
    out = capsys.readouterr().out
    assert "stopped early" in out and "resume with" not in out
    report_early_end(SimpleNamespace(**ended, resumable=True), "apps.grpo")
    assert f"resume with: {module_command('apps.grpo', 'resume=RUN')}" in capsys.readouterr().out


@pytest.mark.unit
def test_the_start_up_line_names_the_rival_and_snapshot_procs_with_the_rest():

    config = GRPOConfig(env=EnvConfig(name="nim", seats=["policy", "rival"]), eval=AGAINST_RANDOM)
    assert config.plan().meshes().endswith("rival trainer x1, rival generators x1")
    config = GRPOConfig(env=EnvConfig(name="nim", seats=["policy", "snapshot"]), eval=AGAINST_RANDOM)
    assert config.plan().meshes().endswith("snapshot generators x1")
    assert "rival" not in GRPOConfig().plan().meshes()


@pytest.mark.unit
def test_a_snapshot_seat_in_evaluations_alone_still_counts_its_generators_before_the_rivals():
    """The rival's generators are the procs after the policy's and the snapshot's, wherever the
    snapshot seat is (env.seats or eval.seats only)."""
    rival = EnvConfig(name="nim", seats=["policy", "rival"])
    assert GRPOConfig(env=rival, eval=AGAINST_RANDOM).snapshot_generators == 0
    config = GRPOConfig(env=rival, eval=EvalConfig(seats=["policy", "snapshot"]))
    assert config.snapshot_generators == 1
    two_nodes = PlacementConfig(trainer_hosts=[0], generator_hosts=[0, 0, 1])  # generator2: the rival's
    with pytest.raises(ConfigError, match=r"rival.generators=1: .* on node\(s\) \[1\]"):
        GRPOConfig(env=rival, eval=EvalConfig(seats=["policy", "snapshot"]), placement=two_nodes)
