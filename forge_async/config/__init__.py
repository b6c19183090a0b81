"""Config machinery: range checks, the schema overrides are checked against, user callables."""
