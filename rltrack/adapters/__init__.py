"""Adapters: one module per framework, each turning its native logs into rltrack events.
Each imports its framework only when used, so `import rltrack.adapters.<x>` works without it."""
