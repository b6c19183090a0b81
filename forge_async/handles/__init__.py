"""Typed handles, one per role of a run: each owns its proc mesh, its actors and what
happens when their proc dies (supervision.py), and offers the calls the rest of the
controller makes as named methods."""
