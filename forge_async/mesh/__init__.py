"""Procs and actors on Monarch: which role runs where, spawning procs, calls and their failures."""
