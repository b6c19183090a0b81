"""The run's actor meshes: spawned, located, brought back when they fail, stopped.

Monarch reports a proc that dies (a SIGKILL, an OOM kill) as a SupervisionError
on every call to its actors. Here that becomes policy:

- a generator is respawned (new proc, current weights) and the generate call it
  lost is issued again on the new one, up to `generator.max_restarts` times;
- the replay buffer is respawned empty; the episodes it held are counted as
  dropped with reason `buffer_lost`, and the call is retried;
- a failed trainer rank ends the run with a TrainerFailed naming the rank, its
  host and pid (resume from the last checkpoint);
- a failed model scorer ends the run with a ScorerFailed naming the scorer, its
  host and pid (the run saves what it learned, as after a generator failure).

`procs.json` in the run directory maps every role to its host and pid, and is
rewritten whenever a proc is replaced, so operators (and tests) can find them.
"""

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from monarch.actor import ActorError

from forge_async.config import GRPOConfig
from forge_async.data.episode import Episode
from forge_async.errors import TrainerFailed, UserError
from forge_async.launch import meshes
from forge_async.launch.procs import RunProcs
from forge_async.tracing import TRACER
from forge_async.models.checkpoint import Checkpoint
from forge_async.actors.environment_host import EnvironmentHost
from forge_async.actors.located import here
from forge_async.envs.remote import RemoteEnvironments
from forge_async.scoring.scorer import ScorerFailed

_STOP_TIMEOUT_S = 10
_RESPAWN_TIMEOUT_S = 40  # a generator that cannot be respawned in this long: its node is gone
_POINT = re.compile(r"\{('\w+': \d+/\d+(?:, '\w+': \d+/\d+)*)\}")  # {'hosts': 1/2, 'procs': 0/1}
_COORD = re.compile(r"'(\w+)': (\d+)/(\d+)")
# A proc Monarch stopped hearing from is named by its row-major rank: trainer-1<uid>.
_TRAINER_PROC = re.compile(r"\btrainer-(\d+)<")


class GeneratorFailed(RuntimeError):
    """Generators failed more often than generator.max_restarts allows."""


def _is_proc_failure(err: BaseException) -> bool:
    # Monarch's SupervisionError (a RuntimeError from its Rust bindings).
    return type(err).__name__ == "SupervisionError"


def _failed_rank(message: str) -> int | None:
    """The row-major rank of the failed trainer proc, from Monarch's error text.

    A proc that exited is reported by its mesh point ({'hosts': 1/2, 'procs': 0/1});
    one whose agent stopped answering (seen on loaded machines) by its proc name.
    """
    point = _POINT.search(message)
    if point is not None:
        rank = 0
        for _, index, size in _COORD.findall(point.group(1)):
            rank = rank * int(size) + int(index)
        return rank
    proc = _TRAINER_PROC.search(message)
    return None if proc is None else int(proc.group(1))


async def _within(awaitable: Awaitable, seconds: float):
    """`awaitable`'s result, or TimeoutError after `seconds`, abandoning it (a Monarch call to a
    dead node may not end when cancelled, so asyncio.wait_for could wait for it anyway)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        raise TimeoutError(f"no answer within {seconds:.0f}s")
    return task.result()


async def _stop_quietly(procs) -> None:
    """Stop a mesh that may already be dead; never hang on it."""
    try:
        await _within(procs.stop(), _STOP_TIMEOUT_S)
    except Exception:
        pass


class RunMeshes:
    """Every actor mesh of one GRPO run."""

    def __init__(self, run_dir: Path, checkpoint: Checkpoint, pad_id: int, procs: RunProcs):
        self.run_dir = run_dir
        self.procs = procs
        self.hosts = procs.hosts
        self.checkpoint = checkpoint
        self.config: GRPOConfig = procs.config
        self.pad_id = pad_id
        self.generator_restarts = 0
        self.lost_requests = 0  # completions whose generate call died with its generator
        self.on_generator_restart: Callable[[int, object], Awaitable[None]] | None = None
        self._procs: dict[str, object] = {}  # role -> proc mesh
        self._where: dict[str, object] = {"controller": here()}
        self._generators: list = []
        self._restart_locks: list[asyncio.Lock] = []
        self.relay_nodes: list[int] = []  # generator nodes reached through a WeightRelay
        self._relays: list = []
        self._scorers: dict[int, object] = {}  # position in config.scorers -> its LogprobModel
        self._environment_hosts: list = []  # EnvironmentHost actors (env.procs)

    async def start(self) -> list[float]:
        """Spawn trainer, generators, buffer and weight relays, all at once; returns engine start times.

        Bad input a proc finds as it starts (a GPU its node lacks) is raised as the UserError
        it is: one line, not a remote traceback."""
        self.buffer = SupervisedBuffer(self)
        try:
            spawned, *_ = await asyncio.gather(
                asyncio.gather(*(self._spawn_generator(i) for i in range(self.config.generator.count))),
                self._spawn_trainer(),
                self.buffer.spawn(),
                self._spawn_relays(),
                self._spawn_scorers(),
                self._start_store(),
            )
        except ActorError as err:
            if isinstance(err.exception, UserError):
                raise err.exception from None
            raise
        self._generators = [g for g, _ in spawned]
        self._restart_locks = [asyncio.Lock() for _ in spawned]
        self._write_procs_file()
        return [t for _, t in spawned]

    async def _start_store(self) -> None:
        if self.uses_torchstore:
            from forge_async.weights import store  # torchstore: ~1 s to import, only where it is used

            await store.start_store()

    @property
    def uses_torchstore(self) -> bool:
        """Whether weights may travel through torchstore: its transport, or relays to other nodes."""
        return self.config.weights.transport == "torchstore" or self.hosts.nnodes > 1

    async def _spawn_trainer(self) -> None:
        c = self.config
        reference = None if c.trainer_reference is None else str(self._scorer_checkpoint(c.trainer_reference).path)
        self._procs["trainer"], self.trainer = await meshes.spawn_trainer(
            self.checkpoint, c.trainer, self.pad_id, c.weights, self.procs.host("trainer"),
            procs=self.procs.take("trainer"), loss=c.loss, importance=c.importance, kl_coef=c.kl_coef,
            reference_path=reference, lora=c.model.lora,
        )
        self._where["trainer"] = list((await self.trainer.where.call()).values())

    async def _spawn_scorers(self) -> None:
        """A LogprobModel for each model scorer: its checkpoint, or the initial policy's."""
        for index, scorer in enumerate(self.config.scorers):
            if not scorer.runs_a_model:
                continue
            checkpoint = self._scorer_checkpoint(index)
            role = f"scorer{index}"
            self._procs[role], self._scorers[index] = await meshes.spawn_logprob_model(
                checkpoint, self.pad_id, role, scorer.threads, procs=self.procs.take(role)
            )
            self._where[role] = await self._scorers[index].where.call_one()

    def _scorer_checkpoint(self, index: int) -> Checkpoint:
        """Scorer `index`'s checkpoint, checked to share the policy's vocabulary."""
        path = self.config.scorers[index].path
        if path is None:
            return self.checkpoint
        checkpoint = Checkpoint.open(path)
        if checkpoint.shape.vocab_size != self.checkpoint.shape.vocab_size:
            raise UserError(
                f"scorers[{index}].path={path}: vocabulary of {checkpoint.shape.vocab_size} tokens, the policy's "
                f"has {self.checkpoint.shape.vocab_size}; a scorer must use the policy's tokenizer"
            )
        return checkpoint

    async def call_scorer(self, index: int, call: Callable[[object], Awaitable]):
        """`call(model)` on model scorer `index`; a dead proc becomes a ScorerFailed naming it."""
        try:
            return await call(self._scorers[index])
        except Exception as err:
            if not _is_proc_failure(err):
                raise
            label = self.config.scorers[index].label
            cause = str(err).splitlines()[-1].strip() if str(err) else type(err).__name__
            raise ScorerFailed(
                f"scorer {label!r} ({_located(self._where[f'scorer{index}'])}) failed: {cause}"
            ) from None

    async def spawn_environments(self, new_environment: Callable[[], object]) -> RemoteEnvironments:
        """An EnvironmentHost making environments with `new_environment` on each of the env.procs
        procs; returns the factory of their proxies (the episodes' environments)."""
        hosts = []
        for index in range(self.config.env.procs):
            role = f"environment{index}"
            self._procs[role] = self.procs.take(role)
            host = self._procs[role].spawn(role, EnvironmentHost, new_environment)
            self._where[role] = await host.where.call_one()
            self._environment_hosts.append(host)
            hosts.append((host, _located(self._where[role])))
        self._write_procs_file()
        return RemoteEnvironments(hosts)

    def _generator_node(self, index: int) -> int:
        return self.config.placement.generator_host(index)

    async def _spawn_relays(self) -> None:
        """A weight relay on each generator node that cannot read the trainer's own channel."""
        c = self.config
        trainer_nodes = c.placement.trainer_hosts
        own = set(trainer_nodes) if len(trainer_nodes) == 1 else set()  # one node: its channel
        generator_nodes = {self._generator_node(i) for i in range(c.generator.count)}
        self.relay_nodes = sorted(generator_nodes - own) if c.weights.transport == "shm" else []
        for node in self.relay_nodes:
            procs, relay = await meshes.spawn_weight_relay(
                c.weights.channel_dir, self.hosts.node(node), node, procs=self.procs.take(f"weight_relay{node}")
            )
            self._procs[f"weight_relay{node}"] = procs
            self._where[f"weight_relay{node}"] = await relay.where.call_one()
            self._relays.append(relay)

    def weight_routes(self) -> tuple[list, list[int | None], bool, tuple[str, ...]]:
        """How versions reach the generators (see WeightSync): receivers, the receiver of each
        generator, whether the receivers are the generators themselves, and the trainer's push targets."""
        count = self.generator_count
        if self.config.weights.transport == "torchstore":
            receivers = [
                lambda v, i=i: self.call_generator(i, lambda g: g.load_version.call_one(v)) for i in range(count)
            ]
            return receivers, list(range(count)), True, ("torchstore",)
        receivers = [lambda v, j=j: self._relay_load(j, v) for j in range(len(self._relays))]
        receiver_of = [
            self.relay_nodes.index(node) if (node := self._generator_node(i)) in self.relay_nodes else None
            for i in range(count)
        ]
        targets = (("shm",) if None in receiver_of else ()) + (("torchstore",) if self._relays else ())
        return receivers, receiver_of, False, targets

    async def _relay_load(self, index: int, version: int) -> dict:
        try:
            return await self._relays[index].load_version.call_one(version)
        except Exception as err:
            if not _is_proc_failure(err):
                raise
            where = self._where[f"weight_relay{self.relay_nodes[index]}"]
            raise GeneratorFailed(f"the weight relay ({_located(where)}) failed: {err}") from None

    async def _spawn_generator(self, index: int) -> tuple[object, float]:
        c = self.config
        self._procs[f"generator{index}"], generator, timing = await meshes.spawn_generator(
            self.checkpoint, c.generator, c.weights, index, procs=self.procs.take(f"generator{index}"),
            lora=c.model.lora,
        )
        self._where[f"generator{index}"] = await generator.where.call_one()
        return generator, timing["engine_start_s"]

    @property
    def generator_count(self) -> int:
        return len(self._generators)

    async def call_generator(self, index: int, call: Callable[[object], Awaitable], requests: int = 0):
        """`call(generator)` on generator `index`; if its proc dies, respawn it and call again.

        `requests`: how many completions the call asks for (counted as lost if it dies).
        """
        while True:
            generator = self._generators[index]
            try:
                return await call(generator)
            except Exception as err:
                if not _is_proc_failure(err):
                    raise
                self.lost_requests += requests
                await self._restart_generator(index, generator, err)

    async def ask_generators(self, call: Callable[[object], Awaitable]) -> list:
        """`call(generator)` on each generator as it is; None for one that has failed (no respawn)."""
        answers = []
        for generator in self._generators:
            try:
                answers.append(await call(generator))
            except Exception as err:
                if not _is_proc_failure(err):
                    raise
                answers.append(None)
        return answers

    async def generate(self, index: int, prompt_ids: list, sampling, n: int, pin: bool = False) -> list:
        """Completions from generator `index` (`pin`: all by one version); a call lost with its
        generator is issued again."""
        return await self.call_generator(
            index, lambda g: g.generate.call_one(prompt_ids, sampling, n, pin), len(prompt_ids) * n
        )

    async def _restart_generator(self, index: int, dead, err: Exception) -> None:
        """Replace generator `index` once per failure, however many callers saw it fail."""
        async with self._restart_locks[index]:
            if self._generators[index] is dead:
                await self._replace_generator(index, err)

    async def _replace_generator(self, index: int, err: Exception) -> None:
        where = self._where[f"generator{index}"]
        if self.generator_restarts >= self.config.generator.max_restarts:
            raise GeneratorFailed(
                f"generator {index} ({_located(where)}) failed and "
                f"generator.max_restarts={self.config.generator.max_restarts} restarts are used up: {err}"
            )
        self.generator_restarts += 1
        start = time.perf_counter()
        print(
            f"generator {index} ({_located(where)}) failed; "
            f"respawning (restart {self.generator_restarts}/{self.config.generator.max_restarts}) ...",
            flush=True,
        )
        await _stop_quietly(self._procs[f"generator{index}"])
        try:
            if not self.hosts.reachable(where["node"]):
                raise ConnectionError(f"node {where['node']} does not answer")
            self._generators[index], _ = await _within(self._spawn_generator(index), _RESPAWN_TIMEOUT_S)
        except Exception as respawn_err:  # its node is gone (or cannot start procs)
            raise GeneratorFailed(
                f"generator {index} ({_located(where)}) failed and could not be respawned on node "
                f"{where['node']} within {_RESPAWN_TIMEOUT_S}s: {type(respawn_err).__name__} {respawn_err}"
            ) from None
        if self.on_generator_restart is not None:
            await self.on_generator_restart(index, self._generators[index])
        self._write_procs_file()
        print(f"generator {index} back in {time.perf_counter() - start:.1f}s", flush=True)

    async def call_trainer(self, call: Callable[[object], Awaitable]):
        """`call(trainer)` (an endpoint call on every rank): rank 0's answer.

        A dead trainer proc becomes a TrainerFailed naming its rank.
        """
        try:
            return (await call(self.trainer)).get(0)
        except Exception as err:
            if not _is_proc_failure(err):
                raise
            raise TrainerFailed(self._name_trainer_failure(err)) from None

    def _name_trainer_failure(self, err: Exception) -> str:
        rank = _failed_rank(str(err))
        if rank is None or rank >= len(self._where["trainer"]):
            return f"a trainer proc failed: {err}"
        cause = str(err).splitlines()[-1].strip()
        return f"trainer rank {rank} ({_located(self._where['trainer'][rank])}) failed: {cause}"

    async def trace_spans(self) -> dict[str, list]:
        """Every actor's spans since the last call, by track; a proc that cannot answer is left out."""
        tracks = {"controller": TRACER.take()}
        calls = {"trainer": self.trainer.trace_spans.call(), "replay buffer": self.buffer.actor.trace_spans.call_one()}
        calls.update({f"generator {i}": g.trace_spans.call_one() for i, g in enumerate(self._generators)})
        calls.update(
            {f"scorer {self.config.scorers[i].label}": m.trace_spans.call_one() for i, m in self._scorers.items()}
        )
        calls.update({f"environment {i}": h.trace_spans.call_one() for i, h in enumerate(self._environment_hosts)})
        for track, call in calls.items():
            try:
                spans = await _within(call, _STOP_TIMEOUT_S)
            except Exception:
                continue
            if track == "trainer":
                tracks.update({f"trainer rank {rank}": s for rank, s in enumerate(spans.values())})
            else:
                tracks[track] = spans
        return tracks

    @property
    def placement(self) -> dict:
        """Where each mesh runs, as its actors report it: node ranks."""
        return {
            "trainer": sorted({rank["node"] for rank in self._where["trainer"]}),
            "generators": [self._where[f"generator{i}"]["node"] for i in range(self.generator_count)],
        }

    def _write_procs_file(self) -> None:
        path = self.run_dir / "procs.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._where, indent=2))
        tmp.replace(path)

    def _alive(self, role: str) -> bool:
        """Whether every node `role` runs on still answers (a dead node's procs died with it)."""
        where = self._where.get(role, [])
        return all(self.hosts.reachable(w["node"]) for w in (where if isinstance(where, list) else [where]))

    async def stop(self) -> None:
        """Stop every proc that can still be reached, all at once, then the store."""
        await asyncio.gather(*(self._remove_channel(node, relay) for node, relay in zip(self.relay_nodes, self._relays)))
        await asyncio.gather(*(_stop_quietly(procs) for role, procs in self._procs.items() if self._alive(role)))
        await self.procs.stop_unused()
        if self.uses_torchstore:
            from forge_async.weights import store

            await store.stop_store()

    async def _remove_channel(self, node: int, relay) -> None:
        """A relay's node keeps its shared-memory channel until told to remove it."""
        if self._alive(f"weight_relay{node}"):
            try:
                await _within(relay.remove_channel.call_one(), _STOP_TIMEOUT_S)
            except Exception:
                pass


class SupervisedBuffer:
    """The replay buffer actor, respawned empty if its proc dies.

    Keeps its own count of what went in and came out, so that when a buffer is
    lost, the episodes it held are counted (`buffer_lost`) in the new buffer's
    counters and the run's accounting still adds up.
    """

    def __init__(self, owner: RunMeshes):
        self.owner = owner
        self._counters = {"added": 0, "sampled": 0, "dropped": {}, "kept_zero_variance": 0}
        self._replacing = asyncio.Lock()

    async def spawn(self) -> None:
        c = self.owner.config
        self.owner._procs["replay_buffer"], self.actor = await meshes.spawn_replay_buffer(
            c.max_policy_age, c.buffer_capacity, procs=self.owner.procs.take("replay_buffer"),
            drop_zero_variance=c.filter.zero_variance_groups,
            max_zero_variance_drops=c.filter.max_drops(c.batch_size),
        )
        self.owner._where["replay_buffer"] = await self.actor.where.call_one()

    async def _call(self, call: Callable[[object], Awaitable]):
        while True:
            actor = self.actor
            try:
                return await call(actor)
            except Exception as err:
                if not _is_proc_failure(err):
                    raise
                async with self._replacing:  # once per failure, however many callers saw it
                    if self.actor is actor:
                        await self._replace(err)

    async def _replace(self, err: Exception) -> None:
        c = self._counters
        held = c["added"] - c["sampled"] - sum(c["dropped"].values())
        dropped = dict(c["dropped"])
        dropped["buffer_lost"] = dropped.get("buffer_lost", 0) + held
        where = self.owner._where["replay_buffer"]
        print(
            f"replay buffer ({_located(where)}) failed; respawning it, "
            f"{held} episodes it held are lost (counted as buffer_lost)",
            flush=True,
        )
        await _stop_quietly(self.owner._procs["replay_buffer"])
        await self.spawn()
        self._counters = {**c, "dropped": dropped}
        await self.actor.load_state_dict.call_one({"episodes": [], **self._counters})
        self.owner._write_procs_file()

    async def add(self, episodes: list[Episode], dropped: dict[str, int] | None = None) -> None:
        await self._call(lambda b: b.add.call_one(episodes, dropped))
        self._counters["added"] += len(episodes) + sum((dropped or {}).values())

    async def sample(
        self, batch_size: int, trainer_version: int, wait_s: float = 0.0
    ) -> tuple[list[Episode] | None, dict]:
        """A batch (None: not enough fresh episodes yet, after waiting up to `wait_s` for the next
        add) and the buffer's stats after taking it."""
        batch, stats = await self._call(lambda b: b.sample_with_stats.call_one(batch_size, trainer_version, wait_s))
        if batch is not None:
            self._counters["sampled"] += len(batch)
        return batch, self._noted(stats)

    async def stats(self) -> dict:
        return self._noted(await self._call(lambda b: b.stats.call_one()))

    def _noted(self, stats: dict) -> dict:
        self._counters["dropped"] = dict(stats["dropped_by_reason"])
        self._counters["kept_zero_variance"] = stats["kept_zero_variance"]
        return stats

    async def state_dict(self) -> dict:
        return await self._call(lambda b: b.state_dict.call_one())

    async def load_state_dict(self, state: dict) -> None:
        await self._call(lambda b: b.load_state_dict.call_one(state))
        self._counters = {k: state[k] for k in ("added", "sampled", "dropped")}
        self._counters["kept_zero_variance"] = state.get("kept_zero_variance", 0)


def _located(where: dict) -> str:
    return f"pid {where['pid']} on node {where['node']}: {where['host']}, {where['addr']}"
