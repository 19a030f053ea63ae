"""Delivery of a journal to the sinks and trackers: backends by config name, built from config, a cursor per tracker and writer."""
