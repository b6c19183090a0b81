"""The trainer's learning, without its actor, and its config section."""
