"""What rltrack knows about DI-engine and LightZero's serial pipelines, as data:
their writer (tensorboardX, `./<exp_name>/log/serial`) writes every value
twice, `<stage>_iter/<key>` at train_iter and `<stage>_step/<key>` at env
steps, which the translation (rltrack.frameworks.tensorboard) pairs into one
value with both axes (rltrack.frameworks.tensorboard_tags.TWIN_TAG). Their
stage blocks, which rltrack's own DI layout writes, are rltrack.frameworks.stages.
"""

from __future__ import annotations

from rltrack.frameworks.library import Library

LIBRARY = Library(packages=("ding", "lzero"), twins=True)
