"""The CPU worlds and their registry: a world is a model, a task and the scaling of any preset to it.

    cache.py       how a world is built once, atomically, into $LAGRL_CACHE and shared (World)
    scaling.py     the shared part of scaling a preset down: D_R/D_T, N_reuse and N_SGD kept, one CPU actor
    tokenizer.py   the worlds' one tokenizer trainer (a byte-level BPE with Qwen2's pre-tokenisation)
    warmup_loop.py the worlds' one supervised warm-up loop (AdamW until a sampled check passes; not the
                   recipes' SFT stage, launch.recipes.sft)
    sampling.py    sampling a policy as the actors do, with per-token entropy (reasoning, routes)
    tiny/          arithmetic with 7-token answers: the demo and most tests (``--tiny``)
    reasoning/     written-out running sums, 13-159 tokens: budgets, truncation and shaping bite (``--reasoning``)
    code/          a+b and one-line Python programs in the verl layout: code in the loop (``--code``)
    routes/        sums solved along many equivalent routes: a policy with entropy to lose (``--routes``), and
                   the same grammar by a slipping teacher: entropy RL takes away (``--slips``)
    shapes/        Qwen2.5-0.5B's shapes with random weights: memory and time at real size (``--shapes``)

    python -m launch.worlds tiny            # build (or find) a world and print its manifest

``launch.config.worlds.WORLDS`` (the registry, in the config layer: the config's ``world`` field takes its
names from it) maps each world's name to where its three parts live, as ``"module:attribute"``
references loaded on first use (a world's modules import torch and the run config, which the registry
must not):

- ``scale``: ``scale(cfg: RunConfig) -> RunConfig``, any preset scaled to the world (``--world``);
- ``build``: ``build(seed=0, cache_dir=None, log=print) -> cache.World``, the built world (cached);
- ``template``: the prompt template of its problems (``"Q: {problem}\\nA: "``), used when the world's
  tokenizer has no chat template (the code world's has one).

Adding a world: a folder here (its task, model, ``build.py`` through :func:`cache.ensure_world`, and
``scale.py`` through :func:`scaling.rescale`) and one entry in ``launch/config/worlds.py``. Nothing else: the
config's ``world`` field, the ``--world NAME`` / ``--NAME`` flags of every entry script, the
driver's model and data, and ``python -m launch.worlds NAME`` all come from the entry.
"""

from __future__ import annotations

from launch.config.refs import load
from launch.config.worlds import WORLDS, WorldEntry, WorldName  # noqa: F401  (the registry, re-exported)


def entry(name: str) -> WorldEntry:
    if name not in WORLDS:
        raise KeyError(f"unknown world {name!r}; choose from: {', '.join(WORLDS)}")
    return WORLDS[name]


def scale_to_world(cfg, name: str):
    """``cfg`` (a RunConfig) scaled to world ``name`` (the world's ``scale``; its docstring says what is kept)."""
    return load(entry(name).scale)(cfg)


def world_data(name: str, data) -> tuple[str, str, str | None, str]:
    """(model dir, train path, eval path, prompt template) of a run in world ``name``: what ``data`` (the
    run's DataConfig) names, else the world's own (built on first use)."""
    spec = entry(name)
    world = load(spec.build)()
    eval_path = data.eval_path or (str(world.val_path) if spec.evaluates else None)
    return (data.model_dir or str(world.model_dir), data.train_path or str(world.train_path), eval_path,
            load(spec.template))
