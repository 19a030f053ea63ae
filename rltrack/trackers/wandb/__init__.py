"""The W&B tracker: the backend (the W&B run's life), its rows (what W&B makes of each event) and its history files."""
