"""Keeps credentials out of everything rltrack writes.

A training config often carries an API key or a password next to the learning
rate, and hyperparameters are copied to files (total_config.py, meta.json, the
journal, text logs) and to trackers (params, config, tags). A `Redactor`
replaces, before any of that happens:

* string values under keys that look like credentials (`api_key`, `token`,
  `password`, `secret`, ... plus the patterns of config `run.redact`), at any
  depth of a mapping, by `REDACTED`; numbers are left alone (`max_tokens = 512`
  is a hyperparameter, not a secret);
* the values of environment variables whose names look like credentials
  (`WANDB_API_KEY`, `NEPTUNE_API_TOKEN`, ...) wherever they appear inside a
  string, e.g. in `sys.argv` or a logged text.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

REDACTED = "<redacted>"

#: Key fragments that mark a credential. A fragment matches a whole word of the
#: key (words split at anything but letters and digits), so `tokenizer` and
#: `author` are not secrets, while `wandb_api_key` and `db.password` are.
DEFAULT_PATTERNS = (
    r"api[_-]?key",
    r"access[_-]?key",
    r"private[_-]?key",
    r"secret",
    r"token",
    r"password",
    r"passwd",
    r"credentials?",
    r"auth",
)

#: Shorter environment values are not hunted for inside strings: "1" or "true"
#: would turn every text into a row of redactions.
MIN_ENV_SECRET = 6


class Redactor:
    def __init__(self, patterns: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        words = "|".join(f"(?:{p})" for p in (*DEFAULT_PATTERNS, *patterns))
        self._key = re.compile(rf"(?i)(?:^|[^a-z0-9])(?:{words})(?:$|[^a-z0-9])")
        self._known: dict[str, bool] = {}
        environ = os.environ if environ is None else environ
        values = {v for k, v in environ.items() if self.is_secret_key(k) and len(v) >= MIN_ENV_SECRET}
        self._values = sorted(values, key=len, reverse=True)  # longest first: one may contain another

    def is_secret_key(self, key: Any) -> bool:
        key = str(key)
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = bool(self._key.search(key))
        return known

    def text(self, value: str) -> str:
        """`value` with every known secret value cut out."""
        for secret in self._values:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def argv(self, args: list[str]) -> list[str]:
        """A command line as it may be written: `--api-key=X` and `--api-key X`
        lose X, known secret values are cut out of every argument."""
        out: list[str] = []
        hide_next = False
        for arg in args:
            flag, equals, _ = arg.partition("=")
            if hide_next:
                out.append(REDACTED)
            elif equals and flag.startswith("-") and self.is_secret_key(flag.lstrip("-")):
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(self.text(arg))
            hide_next = not equals and arg.startswith("-") and self.is_secret_key(arg.lstrip("-"))
        return out

    def value(self, key: Any, value: Any) -> Any:
        """`value` as it may be written under `key`."""
        if isinstance(value, Mapping):
            return self.mapping(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(key, v) for v in value)
        if isinstance(value, (str, bytes)) and self.is_secret_key(key):
            return REDACTED
        return self.text(value) if isinstance(value, str) else value

    def mapping(self, data: Mapping[Any, Any]) -> dict[Any, Any]:
        """A redacted copy; the input is left as it was (it may be the user's own config)."""
        return {key: self.value(key, value) for key, value in data.items()}
