"""The fixtures of the console's browser tests (defined in browser_support.py): ``ledger``
(one server per module), ``fresh_ledger`` (one per test), ``browser_paths``, ``driver``,
``artifacts`` and ``shoot``."""

from browser_support import (  # noqa: F401 - fixtures, registered by being here
    artifacts,
    browser_paths,
    driver,
    fresh_ledger,
    ledger,
    shoot,
)
