"""Trackers (MLflow, W&B, Neptune, trackio), one module or subpackage each, on the base class in rltrack.trackers.remote."""
