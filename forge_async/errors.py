"""Errors for bad user input; the app prints these as one line, without a traceback."""


class ConfigError(ValueError):
    """A configuration value out of its allowed range, naming the key."""
