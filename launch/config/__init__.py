"""The run configuration, the bottom layer of ``launch/``: what a run is, before anything runs.

    run.py            RunConfig and its own parts (DataConfig, StageConfig); the components' configs
                      (buffer, actors, rewards, learner) are theirs, composed here
    presets.py        the named presets (the paper's ablations); skyt1_presets.py: the Sky-T1 recipe's
    overrides.py      ``--section.field VALUE`` on any config
    layout.py         the GPU layout: refusals from the config alone and the weight transport 'auto' picks
    worlds.py         the registry of CPU worlds (names and "module:attribute" strings)
    tracking.py       TrackingConfig and the registry of experiment trackers
    refs.py           loading a registry's "module:attribute"      redact.py  secrets out of configs and text
    install_check.py  the project's generic package names are this checkout's (every entry point first)

Everything here is pure: pydantic models and functions over them, no Ray, vLLM, Redis or torch.
"""

from launch.config.run import DataConfig, RunConfig, StageConfig

__all__ = ["DataConfig", "RunConfig", "StageConfig"]
