"""Importers: other tools' saved runs turned into rltrack run directories.

Each importer writes through the normal machinery (`make_logger` with the
local backend, events emitted with their original times and steps), so an
imported run is an ordinary run directory: `rltrack show` reads it and
`rltrack sync RUN --to mlflow` delivers it to a tracker.

    neptune      Neptune 1.x `.neptune/offline` and `.neptune/async` folders
    tensorboard  folders of TensorBoard event files (CleanRL, Tianshou, skrl, rsl_rl, DI-engine)
"""
