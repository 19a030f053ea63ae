"""The command line: `rltrack` and its subcommands."""
