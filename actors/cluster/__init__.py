"""How a run's Ray processes start on a cluster: code the generation actors and the learner ranks share.

    placement.py     which node takes a process (custom resources, off the driver's node), waiting
                     for it with a word every minute, and where every process ran (placement.json)
    model_source.py  how the model directory reaches each node (the shared path, or pieces through
                     Ray's object store into a node-local, content-addressed cache)
    priority.py      the CPU priority of the run's Ray workers (nice 0, not Ray's 15)

Layering (DESIGN.md §1, as the code keeps it; tests/unit/test_import_graph.py checks it module by
module): ``actors.cluster`` imports nothing else of the project, like ``buffer`` and ``rewards``; the rest
of ``actors`` and the ``learner`` both import it, so the learner needs from ``actors`` only this and the
weight-transport interface (``actors.transport``).
"""
