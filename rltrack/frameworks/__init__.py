"""What rltrack knows about each framework, one module per framework, as data and pure functions.

Beside them, what they share: the canonical (DI-engine) vocabulary (`canonical`)
and DI-engine's stage blocks (`stages`).

Per framework: its key names, namespaces and step columns, and the map of its
keys to the canonical (DI-engine) vocabulary. The adapters (rltrack.adapters,
hooks into a live framework) and the run database's readers (rltrack.runs,
a framework's files) both import these modules; neither imports the other.
Nothing here imports the framework itself, numpy or any other package.
"""
