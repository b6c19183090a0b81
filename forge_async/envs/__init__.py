"""Multi-turn episodes: environments the model acts in, turn by turn (docs/environments.md)."""
