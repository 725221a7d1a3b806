"""Everything that composes and starts runs, in layers (each imports only from the layers below it;
tests/unit/test_import_graph.py checks it):

    onpolicy.py offpolicy_reuse4.py ablate.py cli.py    entry scripts and their command line
    experiments/  ops/                                  the science report, analysis, ablation and data filtering;
                                                        the GPU smoke, prepare
    recipes/                                            multi-run recipes: SFT, the Sky-T1 pipeline
    run/                                                one run: compose, driver, feeder, evaluation, trackers
    worlds/                                             the CPU worlds: task, model, scaling of any preset
    config/                                             RunConfig, presets, overrides, layout, registries,
                                                        the install check every entry point runs first
"""

from launch import old_paths

old_paths.install()     # launch.science, launch.smoke, ... (before the layers) for one release
