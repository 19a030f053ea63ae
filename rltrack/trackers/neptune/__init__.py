"""The Neptune tracker: the backend and its offline queue."""
