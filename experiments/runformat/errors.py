"""The project's error for bad input, in a module every part may import (the launcher, the rank
process, the step core, sparsifiers, datasets, kernels, analysis): it depends on nothing.

`ConfigError` carries one line that names the key and the fix; run.py prints it and exits with
code 2, before any process starts. `require` is the one way a check states a rule.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A bad knob: the message names the key and the fix."""


def require(condition: bool, message: str) -> None:
    """Raises ConfigError(message) unless `condition` holds."""
    if not condition:
        raise ConfigError(message)
