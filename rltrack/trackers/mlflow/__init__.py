"""The MLflow tracker: the backend, its batches and the SQLite writer."""
