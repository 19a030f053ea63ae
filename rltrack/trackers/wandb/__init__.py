"""The W&B tracker: the backend and its history files."""
