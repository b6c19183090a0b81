"""Tasks: where a run's prompts come from and how a completion is rewarded.

task.py says what a task is; one module per family (digits, dataset, reasoning_gym, seeds);
demonstrations.py turns a task's prompts into the episodes SFT imitates; registry.py lists the
tasks by `task.name`. Tasks import the protocol, the registry imports the tasks, nothing
imports back. envs/registry.py builds the one `task.name` names: these, or `tool_lookup`, a
built-in game that deals its own prompts (envs/games/).
"""
