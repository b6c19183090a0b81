"""Rollouts: prompts -> generator -> scoring tier -> replay buffer, in the controller.

single_turn.py plays single-turn rollouts (one generate call per batch of prompts),
multi_turn.py multi-turn ones (each group's episodes against their environment, their turns
sent together by envs/turn_batcher.py),
worker.py the one admission-controlled loop that keeps a generator busy with either:
routing.py chooses each call's generator, admission.py admits the call within max_policy_age,
types.py names what passes between them.
"""
