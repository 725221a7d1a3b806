"""The registry of CPU worlds (``--world NAME``, ``--NAME``): each world's name and where its parts live.

Names and ``"module:attribute"`` strings only, nothing imported: the run config's ``world`` field takes its
choices from here, and ``launch.worlds`` loads a world's parts on first use. Adding a world: a folder in
``launch/worlds/`` and one entry in :data:`WORLDS` (its docstring: ``launch/worlds/__init__.py``); with
``science=True`` the science report offers it too (``python -m launch.experiments.science --world NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class WorldEntry:
    scale: str              # "module:function": any preset -> this world
    build: str              # "module:function": the built world (cached)
    template: str           # "module:CONSTANT": the prompt template
    help: str               # one line for --help
    evaluates: bool = True  # data.eval_path defaults to the world's validation split
    science: bool = False   # the science report may run its findings here (its --world choices, a Finding's world)
    # a module run as `python -m MODULE --world NAME --model DIR --seed N --json OUT`: where a policy's entropy
    # sits by the part of the world's grammar. A science finding with final_model keeps its runs' final
    # weights in such a world and splits their entropy at the start and the end (the decision-entropy checks)
    entropy_split: str | None = None


WORLDS: dict[str, WorldEntry] = {
    "tiny": WorldEntry(
        scale="launch.worlds.tiny.scale:scale_to_tiny", build="launch.worlds.tiny.build:ensure_tiny_world",
        template="launch.worlds.tiny.task:PROMPT_TEMPLATE", science=True,
        help="scale to the tiny CPU world (same ratios)"),
    "reasoning": WorldEntry(
        scale="launch.worlds.reasoning.scale:scale_to_reasoning",
        build="launch.worlds.reasoning.build:ensure_reasoning_world",
        template="launch.worlds.reasoning.task:PROMPT_TEMPLATE", science=True,
        help="the reasoning CPU world: written-out running sums, 64 -> 128 -> 256-token budgets, truncation and "
             "overlong shaping bite (launch/worlds/reasoning)"),
    "code": WorldEntry(
        scale="launch.worlds.code.scale:scale_to_code", build="launch.worlds.code.build:ensure_code_world",
        template="launch.worlds.code.scale:PROMPT_TEMPLATE",
        help="the code CPU world: a+b and one-line Python programs trained together, code scored in the sandbox "
             "(launch/worlds/code)"),
    "routes": WorldEntry(
        scale="launch.worlds.routes.scale:scale_to_routes", build="launch.worlds.routes.build:ensure_routes_world",
        template="launch.worlds.routes.task:PROMPT_TEMPLATE", science=True,
        entropy_split="launch.worlds.routes.entropy_sources",
        help="the routes CPU world: sums solved along many equivalent routes, a warmed-up policy with entropy to "
             "lose (>= 0.4 nats/token), 48 -> 96 -> 192-token budgets (launch/worlds/routes)"),
    "slips": WorldEntry(
        scale="launch.worlds.routes.scale:scale_to_slips", build="launch.worlds.routes.build:ensure_slips_world",
        template="launch.worlds.routes.task:PROMPT_TEMPLATE", science=True,
        help="the slips CPU world: the routes grammar, where the rarer separators and check words make the next "
             "addition slip, so the choices RL sharpens hold most of the entropy (launch/worlds/routes)"),
    "shapes": WorldEntry(
        scale="launch.worlds.shapes.scale:scale_to_shapes", build="launch.worlds.shapes.build:ensure_shapes_world",
        template="launch.worlds.tiny.task:PROMPT_TEMPLATE", evaluates=False,
        help="real-size shapes on CPU: Qwen2.5-0.5B architecture with random weights, 512-token responses, "
             "3 measured steps (launch/worlds/shapes)"),
}

WorldName = Literal[tuple(WORLDS)]      # the config's type: exactly the registered names
