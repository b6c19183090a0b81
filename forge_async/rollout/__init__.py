"""Rollouts: prompts -> generator -> scoring tier -> replay buffer, in the controller.

calls.py plays single-turn rollouts (one generate call per batch of prompts),
episodes.py multi-turn ones (each group's episodes against their environment),
turn_batcher.py sends those episodes' turns together,
worker.py the one admission-controlled loop that keeps a generator busy with either.
"""
