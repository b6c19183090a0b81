"""TinyModelWriter: writes the tiny initial model's weights from one of the trainer's procs.

The weights come from TorchTitan's seeded initialisation (models/tiny.py). The trainer's
procs import TorchTitan as they start; the controller, which would otherwise import it for
this alone (CPU taken from the procs starting on the same cores; docs/benchmarks.md,
start-up), writes only the config and the tokenizer. It is not a ProcActor: it shares the
proc with the Trainer, is never stopped on its own, and records no spans.
"""

from monarch.actor import Actor, endpoint


class TinyModelWriter(Actor):
    @endpoint
    async def write_weights(self, directory: str, hf_config: dict, seed: int) -> None:
        from forge_async.models.tiny import write_tiny_weights

        write_tiny_weights(directory, hf_config, seed)
