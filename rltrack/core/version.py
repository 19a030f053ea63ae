"""rltrack's version, in a module of its own so that any layer can read it
(meta.json records it, `rltrack --version` prints it) without importing the
package's public facade, `rltrack/__init__.py`, which sits above everything."""

__version__ = "0.1.0"
