"""The garbage collector set aside during a build's imports and run, and given back as it was found."""

import gc
import weakref

import pytest

from pipelines.heap import collections_paused, older_objects_set_aside


class Node:
    """An object that can sit in a reference cycle, which only the collector frees."""

    def __init__(self):
        self.other = None


def cycle() -> weakref.ref:
    """A reference cycle no name holds, and a weak reference that tells when the collector has freed it."""
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture(autouse=True)
def nothing_set_aside():
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable()


def test_objects_older_than_the_block_are_left_alone_inside_it_and_collected_after():
    older = cycle()
    with older_objects_set_aside():
        assert gc.get_freeze_count() > 0
        newer = cycle()
        gc.collect()
        assert older() is not None  # set aside
        assert newer() is None  # made inside the block: collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert older() is None


def test_objects_a_caller_set_aside_stay_set_aside():
    older = cycle()
    gc.freeze()
    with older_objects_set_aside():
        pass
    gc.collect()
    assert older() is not None
    gc.unfreeze()
    gc.collect()
    assert older() is None


def test_collections_pause_in_the_block_and_resume_after_even_on_an_error():
    with pytest.raises(ValueError), collections_paused():
        assert not gc.isenabled()
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    with collections_paused():
        pass
    assert not gc.isenabled()  # a collector the caller turned off stays off
