"""The rival's handle: a second policy's procs, playing env.seats' `rival` seats (rival.*).

    rival seats' turns --(sent together: TurnBatcher)--> rival generators (rival.generators)
                                                                 ^  take each version
    CHANNEL_DIR/rival <--publish-- rival_trainer (its steps: controller/rival_loop.py)

It has what the trained policy has, of its own: a trainer (proc `rival_trainer`, the trainer's
keys but `rival.lr`) starting from `rival.path` or a tiny model of `rival.seed`, and generators
(procs `generator<i>` after the trained policy's and a snapshot's) that read its shared-memory
channel and take each version as it is published, as the trained policy's do. Its learning (a
buffer, its steps, its figures) is the run's business: controller/rival_loop.py. The rival is
not checkpointed (controller/config.py refuses `resume` with it); the run's end saves its policy
as RUN_DIR/rival_final_model.
"""

import asyncio
from pathlib import Path

from forge_async.data.episode import Completion
from forge_async.errors import UserError
from forge_async.generation.config import SamplingConfig
from forge_async.handles.generators.pool import GeneratorPool
from forge_async.handles.meshes import write_tiny_weights_on
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.handles.trainer import TrainerHandle, save_policy
from forge_async.mesh.roles import RIVAL_TRAINER
from forge_async.mesh.run_plan import RivalSpec
from forge_async.models.hf_checkpoint import WEIGHTS_FILE, Checkpoint
from forge_async.models.tiny import write_tiny_config
from forge_async.envs.turn_batcher import TurnBatcher

CHANNEL = "rival"  # its shared-memory channel: this directory under weights.channel_dir


class Rival:
    def __init__(self, spec: RivalSpec, spawner: RoleSpawner, procs_file: ProcsFile, run_dir: Path):
        """`spawner`: the run's, made the rival's at `start`."""
        self.spec = spec
        self._spawner, self._procs_file, self._run_dir = spawner, procs_file, run_dir
        self._trainer: TrainerHandle | None = None  # from `start`
        self._pool: GeneratorPool | None = None
        self._turns: TurnBatcher | None = None
        self.final_model: str | None = None  # RUN_DIR/rival_final_model, once saved at the end

    @classmethod
    def of_run(
        cls, spec: RivalSpec | None, spawner: RoleSpawner, procs_file: ProcsFile, run_dir: Path
    ) -> "Rival | None":
        """The run's rival, if its plan has one (a `rival` seat in env.seats)."""
        return None if spec is None else cls(spec, spawner, procs_file, run_dir)

    @property
    def trainer(self) -> TrainerHandle:
        if self._trainer is None:
            raise RuntimeError("the rival's trainer is asked for before its start")
        return self._trainer

    @property
    def pool(self) -> GeneratorPool:
        if self._pool is None:
            raise RuntimeError("the rival's generators are asked for before their start")
        return self._pool

    async def start(self) -> list[float]:
        """Its initial model, then its trainer and generators spawned; returns its generators'
        engine start times."""
        spec, plan = self.spec, self._spawner.plan
        channel = str(Path(plan.weights.chosen_dir) / CHANNEL)
        spawner = self._spawner.for_rival(await self._initial_model(), channel, spec.rival.lr)
        self._trainer = TrainerHandle(spawner, self._procs_file)
        self._pool = GeneratorPool(
            spawner, self._procs_file, spec.rival.generators, plan.generator.max_restarts, spec.first_generator
        )
        self._turns = TurnBatcher(self._pool.generate_soonest, spec.turn_batch_wait_s)
        _, starts = await asyncio.gather(self._trainer.start(), self._pool.start())
        return starts

    async def _initial_model(self) -> Checkpoint:
        """rival.path (its vocabulary the policy's), or the tiny model of its seed written into the
        run dir by the rival trainer's procs."""
        path = self.spec.rival.path
        if path is not None:
            checkpoint = Checkpoint.open(path)
            vocab = self._spawner.checkpoint.shape.vocab_size
            if checkpoint.shape.vocab_size != vocab:
                raise UserError(
                    f"rival.path={path}: vocabulary of {checkpoint.shape.vocab_size} tokens, the "
                    f"policy's has {vocab}; the rival must use the policy's tokenizer"
                )
            return checkpoint
        initial = self._run_dir / "rival_initial_model"
        if not (initial / WEIGHTS_FILE).is_file():
            hf_config = write_tiny_config(initial, self._spawner.plan.model.tiny)
            await write_tiny_weights_on(self._spawner.procs.early(RIVAL_TRAINER), initial, hf_config, self.spec.seed)
        return Checkpoint.open(initial)

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One rival seat's turn, sent with the other rival turns asked meanwhile."""
        if self._turns is None:
            raise RuntimeError("a rival turn is asked for before its generators start")
        return await self._turns(prompt_ids, sampling)

    async def save_final(self, path: Path) -> None:
        """Its policy as a Hugging Face checkpoint at `path` (said in summary.json's
        `rival.final_model`); its learning has stopped."""
        self.final_model = await save_policy(
            self.trainer, path, path.with_name("rival_final_adapter"), "rival's policy"
        )

    async def stop(self) -> None:
        await asyncio.gather(
            *([] if self._trainer is None else [self._trainer.stop()]),
            *([] if self._pool is None else [self._pool.stop()]),
        )
