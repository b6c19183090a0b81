"""What every forge_async process needs of its own: runtime settings, imports, exit, memory, child processes."""
