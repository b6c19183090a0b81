"""OpenEnv environment servers of the repo's own (env.name=openenv env.openenv.app=...)."""
