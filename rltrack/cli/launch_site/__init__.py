"""The directory `rltrack run` puts first on PYTHONPATH: its `sitecustomize` attaches rltrack in every Python process below the launcher."""
