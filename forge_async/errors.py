"""Errors the app reports as one line, without a traceback.

Every error caused by bad user input (a config value, a checkpoint, a dataset, a
task) derives from UserError; the app prints it and exits with status 2. The
classes live where they are raised; this module holds the bases, so that the
app's entry point can catch them without importing torch or vLLM.
"""


class UserError(ValueError):
    """Bad input, named in the message; nothing was lost."""


class ConfigError(UserError):
    """A configuration value out of its allowed range, naming the key."""


class TrainerFailed(RuntimeError):
    """A trainer proc died: the run cannot go on (it can be resumed)."""
