"""Tasks: where a run's prompts come from and how a completion is rewarded.

task.py says what a task is; one module per family (digits, dataset, tool_lookup);
registry.py builds the one `task.name` names. Tasks import the protocol, the
registry imports the tasks, nothing imports back.
"""
