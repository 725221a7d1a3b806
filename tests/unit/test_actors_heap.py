"""actors.cluster.heap: start-up garbage is collected, what is alive is frozen out of full collections."""

from __future__ import annotations

import gc
import weakref

from actors.cluster.heap import freeze_startup_heap


class _Node:
    def __init__(self):
        self.other = None


def test_startup_garbage_is_collected_and_live_objects_frozen():
    garbage_a, garbage_b = _Node(), _Node()
    garbage_a.other, garbage_b.other = garbage_b, garbage_a        # a cycle only a collection frees
    gone = weakref.ref(garbage_a)
    del garbage_a, garbage_b
    alive = _Node()
    try:
        frozen = freeze_startup_heap()
        assert gone() is None                                        # collected before the freeze
        assert frozen == gc.get_freeze_count() > 0
        assert id(alive) not in {id(o) for o in gc.get_objects()}   # no generation walks it any more
    finally:
        gc.unfreeze()                                                # the test process's heap as it was
    assert id(alive) in {id(o) for o in gc.get_objects()}
