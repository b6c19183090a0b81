"""The controller: the run's composed config, its training loops, and what it records."""
