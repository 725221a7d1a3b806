"""Operating the project on a machine:

    smoke/       the GPU smoke test, stage by stage, and the wheel closure for an offline GPU host
                 (python -m launch.ops.smoke)
    prepare.py   what a first run would do once: bytecode, vLLM's model inspection, the tiny world (.ci/setup)
"""
