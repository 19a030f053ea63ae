"""The training side: `Logger`, its pipeline, closing at exit, resuming a run, config -> `Logger`."""
