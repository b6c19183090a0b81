"""Every span's name, declared once: the code that records a span (observability/spans.py) and the
offline analyser that reads them back (observability/step_budget.py) import the same constant,
so a misspelt name fails at import instead of making a span the budget never finds."""

# The controller's trainer loop (controller/loop.py and its subclasses), in its lane
TRAINER_LOOP_LANE = "trainer loop"
STEP = "step"
WAIT_FOR_BATCH = "wait for batch"  # async mode: the buffer has no batch yet
GENERATE_BATCH = "generate batch"  # sync mode
WAIT_FOR_WEIGHTS = "wait for weights"  # sync mode: every generator loads the new version
TRAIN_AND_PUSH_CALL = "train_and_push call"
EVALUATE = "evaluate"  # evaluation/schedule.py, in the evaluation lane

# A rollout worker (rollout/worker.py), on the controller's track, in the worker's lane
HELD_BACK = "held back by admission"
GENERATE_AND_SCORE = "generate + score"
BUFFER_ADD = "buffer add"
IN_ORDER = "waits for earlier calls"  # a call done before calls admitted ahead of it (rollout/arrival_order.py)

# The replay buffer (actors/replay_buffer.py)
REPLAY_ADD = "add"
REPLAY_SAMPLE = "sample"

# The trainer (learning/learner.py, actors/trainer.py); FORWARD in a model scorer too
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
PUBLISH_WEIGHTS = "publish weights"

# A generator (actors/generator.py)
DECODE = "decode"
SWAP_WEIGHTS = "swap weights"  # in the generator's weights lane

# Start-up, in each process's START_UP_LANE (benchmarks/pipeline/startup.py lays them out)
START_UP_LANE = "start-up"
LAUNCH = "launch"  # the process created -> its own code runs (a proc's bootstrap; the controller's run)
START_UP_IMPORTS = "start-up imports"  # a proc's bootstrap imports; the controller's training half
INITIAL_POLICY = "initial policy"  # controller: model.path opened, or the tiny model written
TOKENIZER_AND_TASK = "tokenizer and task"  # controller
MESHES_START = "meshes start"  # controller: every role spawned and ready
ROLE_START = "role start"  # controller, in the role's own lane (its name): its actor spawned and set up
