"""How a generator's failure reaches its callers."""


class GeneratorFailed(RuntimeError):
    """Generators failed more often than generator.max_restarts allows, or none is left."""


class GeneratorLost(GeneratorFailed):
    """A call to a generator that is lost with its node: make it on another one (`live`)."""
