"""The generators: one proc and one vLLM engine each (actors/generator.py), seen from the controller.

    pool.py       GeneratorPool: a run's generators, spawned and stopped together; which live
    generator.py  GeneratorHandle: one generator's calls, and its respawn when its proc dies
    lives.py      which generators live, those lost with their node, the restarts left
    pace.py       the pace each keeps, and the routing choice `by_finish_time`
    failures.py   GeneratorFailed, GeneratorLost
    snapshot.py   Snapshot: a `snapshot` seat's generators of their own, a lagged copy of the policy

A generator whose proc dies is respawned (a new proc, then the newest weights:
`on_replaced`) and the call it lost is made again on the new one, up to
generator.max_restarts restarts in all; past that the run ends with a
GeneratorFailed naming it (the trainer is fine: the run saves what it learned).

A generator that cannot be respawned (its node no longer answers: the host died) is
*lost*: its calls raise GeneratorLost, and the run goes on with the others (the
rollout workers move to them). Once no generator is left, GeneratorFailed. If its
node comes back, it is spawned there again (`take_back`) and work goes to it as before.
"""

from forge_async.handles.generators.failures import GeneratorFailed, GeneratorLost
from forge_async.handles.generators.generator import GeneratorHandle
from forge_async.handles.generators.pool import GeneratorPool

__all__ = ["GeneratorFailed", "GeneratorHandle", "GeneratorLost", "GeneratorPool"]
