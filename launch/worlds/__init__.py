"""The CPU worlds and their registry: a world is a model, a task and the scaling of any preset to it.

    cache.py       how a world is built once, atomically, into $LAGRL_CACHE and shared (World)
    scaling.py     the shared part of scaling a preset down: D_R/D_T, N_reuse and N_SGD kept, one CPU actor
    tokenizer.py   the worlds' one tokenizer trainer (a byte-level BPE with Qwen2's pre-tokenisation)
    sft.py         the worlds' one supervised warm-up step loop (AdamW until a sampled check passes)
    sampling.py    sampling a policy as the actors do, with per-token entropy (reasoning, routes)
    tiny/          arithmetic with 7-token answers: the demo and most tests (``--tiny``)
    reasoning/     written-out running sums, 13-159 tokens: budgets, truncation and shaping bite (``--reasoning``)
    code/          a+b and one-line Python programs in the verl layout: code in the loop (``--code``)
    routes/        sums solved along many equivalent routes: a policy with entropy to lose (``--routes``), and
                   the same grammar by a slipping teacher: entropy RL takes away (``--slips``)
    shapes/        Qwen2.5-0.5B's shapes with random weights: memory and time at real size (``--shapes``)

    python -m launch.worlds tiny            # build (or find) a world and print its manifest

:data:`WORLDS` maps each world's name to where its three parts live, as ``"module:attribute"``
references loaded on first use (a world's modules import torch and the run config, which this
registry must not: ``launch.config`` takes the names from here):

- ``scale``: ``scale(cfg: RunConfig) -> RunConfig``, any preset scaled to the world (``--world``);
- ``build``: ``build(seed=0, cache_dir=None, log=print) -> cache.World``, the built world (cached);
- ``template``: the prompt template of its problems (``"Q: {problem}\\nA: "``), used when the world's
  tokenizer has no chat template (the code world's has one).

Adding a world: a folder here (its task, model, ``build.py`` through :func:`cache.ensure_world`, and
``scale.py`` through :func:`scaling.rescale`) and one entry in :data:`WORLDS`. Nothing else: the
config's ``world`` field, the ``--world NAME`` / ``--NAME`` flags of every entry script, the
driver's model and data, and ``python -m launch.worlds NAME`` all come from the entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class WorldEntry:
    scale: str              # "module:function": any preset -> this world
    build: str              # "module:function": the built world (cached)
    template: str           # "module:CONSTANT": the prompt template
    help: str               # one line for --help
    evaluates: bool = True  # data.eval_path defaults to the world's validation split


WORLDS: dict[str, WorldEntry] = {
    "tiny": WorldEntry(
        scale="launch.worlds.tiny.scale:scale_to_tiny", build="launch.worlds.tiny.build:ensure_tiny_world",
        template="launch.worlds.tiny.task:PROMPT_TEMPLATE",
        help="scale to the tiny CPU world (same ratios)"),
    "reasoning": WorldEntry(
        scale="launch.worlds.reasoning.scale:scale_to_reasoning",
        build="launch.worlds.reasoning.build:ensure_reasoning_world",
        template="launch.worlds.reasoning.task:PROMPT_TEMPLATE",
        help="the reasoning CPU world: written-out running sums, 64 -> 128 -> 256-token budgets, truncation and "
             "overlong shaping bite (launch/worlds/reasoning)"),
    "code": WorldEntry(
        scale="launch.worlds.code.scale:scale_to_code", build="launch.worlds.code.build:ensure_code_world",
        template="launch.worlds.code.scale:PROMPT_TEMPLATE",
        help="the code CPU world: a+b and one-line Python programs trained together, code scored in the sandbox "
             "(launch/worlds/code)"),
    "routes": WorldEntry(
        scale="launch.worlds.routes.scale:scale_to_routes", build="launch.worlds.routes.build:ensure_routes_world",
        template="launch.worlds.routes.task:PROMPT_TEMPLATE",
        help="the routes CPU world: sums solved along many equivalent routes, a warmed-up policy with entropy to "
             "lose (>= 0.4 nats/token), 48 -> 96 -> 192-token budgets (launch/worlds/routes)"),
    "slips": WorldEntry(
        scale="launch.worlds.routes.scale:scale_to_slips", build="launch.worlds.routes.build:ensure_slips_world",
        template="launch.worlds.routes.task:PROMPT_TEMPLATE",
        help="the slips CPU world: the routes grammar, where the rarer separators and check words make the next "
             "addition slip, so the choices RL sharpens hold most of the entropy (launch/worlds/routes)"),
    "shapes": WorldEntry(
        scale="launch.worlds.shapes.scale:scale_to_shapes", build="launch.worlds.shapes.build:ensure_shapes_world",
        template="launch.worlds.tiny.task:PROMPT_TEMPLATE", evaluates=False,
        help="real-size shapes on CPU: Qwen2.5-0.5B architecture with random weights, 512-token responses, "
             "3 measured steps (launch/worlds/shapes)"),
}

WorldName = Literal[tuple(WORLDS)]      # the config's type: exactly the registered names


def load(ref: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names (the module is imported now)."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


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
