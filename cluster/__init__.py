"""How a run's Ray processes start on a cluster: code the generation actors and the learner ranks share.

    placement.py     which node takes a process (custom resources, off the driver's node), waiting
                     for it with a word every minute, and where every process ran (placement.json)
    model_source.py  how the model directory reaches each node (the shared path, or pieces through
                     Ray's object store into a node-local, content-addressed cache)
    priority.py      the CPU priority of the run's Ray workers (nice 0, not Ray's 15)

Layering (DESIGN.md §1, as the code keeps it; tests/unit/test_import_graph.py checks it module by
module): ``cluster`` imports none of the other packages, like ``buffer`` and ``rewards``; ``actors``
and ``learner`` both import it, so the learner needs nothing from ``actors`` but the weight-transport
interface (``actors.transport``).
"""
