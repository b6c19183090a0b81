"""Helpers shared by test modules, imported as `tests.support.<module>`.

Fixtures stay in tests/conftest.py; a test module never imports another test module or conftest.
"""
