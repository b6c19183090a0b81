"""Running an app as a user does: the command line's start, its report, and a subprocess run of it."""
