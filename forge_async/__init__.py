"""forge_async: asynchronous RL post-training on Monarch actor meshes."""

from forge_async.process import runtime

runtime.apply_defaults()
