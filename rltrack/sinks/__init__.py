"""Sinks: the run directory and what is written into it or shown in the training process (text logs, progress.csv, TensorBoard, memory, console)."""
