"""Keeps Python's garbage collector off the objects a build lives with: its imports, definitions and older objects."""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def older_objects_set_aside() -> Iterator[None]:
    """Python's garbage collector leaves the objects alive before the block alone while it runs (gc.freeze), and takes
    them back after: a full collection, which the block's allocations set off now and then, otherwise looks at every
    object of the process (Dagster's definitions, matplotlib's, polars': a tenth of a second or more each time at
    100x). A process that set objects aside itself is left as it is: taking ours back would take its own back too."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def collections_paused() -> Iterator[None]:
    """No collection while the block runs: for imports and the code location's definitions, whose objects live as long
    as the process. Collecting them finds nothing, and the full collections their numbers set off cost about 0.1 s
    each (three of them in a build's start-up)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
