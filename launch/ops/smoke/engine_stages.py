"""Stages 2 (an engine whose core runs in its own process generates with log-probs) and 3 (weight
updates through every transport one device allows, checked by the engine's checksum)."""

from __future__ import annotations

import math
import threading
import time

from launch.ops.smoke.context import ENGINE_PROCESS, Context, engine_core_process
from launch.ops.smoke.report import StageFailed, require
from launch.worlds.tiny.task import PROMPT_TEMPLATE, read_problems


def engine_stage(ctx: Context) -> dict:
    from transformers import AutoTokenizer
    from vllm import SamplingParams


    kwargs = ctx.shared_llm_kwargs()
    t0 = time.monotonic()
    llm = ctx.engine(kwargs)
    start_s = time.monotonic() - t0
    in_process, pid = engine_core_process(llm)
    if ENGINE_PROCESS or ctx.cuda:
        require(not in_process, "the engine core runs in this process (engine_process='separate' asked for it "
                                "in its own; on a GPU vLLM always runs it apart)")
    else:
        ctx.notes.append("ActorConfig has no engine_process: on CPU the engine core ran in this process")
    world = ctx.tiny()
    tok = AutoTokenizer.from_pretrained(world.model_dir)
    problems = read_problems(world.val_path)[:8]
    prompts = [{"prompt_token_ids": tok(PROMPT_TEMPLATE.format(problem=p.problem))["input_ids"]} for p in problems]
    params = SamplingParams(n=4, temperature=1.0, max_tokens=16, logprobs=0, seed=0)
    t1 = time.monotonic()
    outs = llm.generate(prompts, params, use_tqdm=False)
    gen_s = time.monotonic() - t1
    logprobs = []
    for out in outs:
        require(len(out.outputs) == params.n, f"{len(out.outputs)} samples for n={params.n}")
        for c in out.outputs:
            require(c.logprobs is not None and len(c.logprobs) == len(c.token_ids),
                    "a sample came back without one log-prob per token")
            logprobs += [step[tid].logprob for step, tid in zip(c.logprobs, c.token_ids)]
    require(bool(logprobs), "no tokens generated")
    bad = [lp for lp in logprobs if not math.isfinite(lp) or lp > 1e-6]
    require(not bad, f"{len(bad)} of {len(logprobs)} log-probs are not finite and <= 0, e.g. {bad[:3]}")
    where = "in this process" if in_process else f"in its own process (pid {pid})"
    return {"line": f"{ctx.engine_dtype}, engine core {where}, start {start_s:.1f} s; {len(outs) * params.n} samples, "
                    f"{len(logprobs)} tokens ({len(logprobs) / gen_s:.0f}/s), log-probs in "
                    f"[{min(logprobs):.2f}, {max(logprobs):.2g}]",
            "dtype": ctx.engine_dtype, "engine_core_in_process": in_process, "engine_core_pid": pid,
            "engine_process_option": ENGINE_PROCESS, "start_s": round(start_s, 1), "tokens": len(logprobs),
            "tokens_per_s": round(len(logprobs) / gen_s, 1), "logprob_min": min(logprobs),
            "logprob_max": max(logprobs), "transport_kwargs": kwargs}


def checksum(llm) -> float:
    return float(llm.collective_rpc("lagrl_weights_checksum")[0])


def push(learner_side, actor_side, llm, weights, version: int, have: int, timeout_s: float = 300.0) -> float:
    """One version from the learner side (this thread publishes, a thread announces: a collective
    broadcast blocks there) into ``llm`` through the actor side's poll, as an actor does between engine
    steps. Returns the seconds from publish to loaded."""
    t0 = time.monotonic()
    location = learner_side.publish(weights, version)
    outcome: dict = {}

    def announce() -> None:
        try:
            outcome["result"] = learner_side.after_announce(weights)
        except BaseException as exc:     # re-raised in the caller's thread
            outcome["error"] = exc

    announcer = threading.Thread(target=announce, name="smoke-announce", daemon=True)
    announcer.start()
    while have != version or announcer.is_alive():
        if "error" in outcome:
            raise outcome["error"]
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"version {version} not loaded {timeout_s:.0f} s after publish")
        if have != version:
            have = actor_side.poll(llm, have, (version, location))
            if have != version:
                time.sleep(0.01)
        else:
            announcer.join(0.05)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome.get("result")
    if isinstance(result, dict):
        require(not result.get("retry") and not result.get("errors"),
                f"the learner side reports a failed send: {result}")
    return time.monotonic() - t0


def learner_weights(ctx: Context, model_dir: str, noise: float = 0.0, seed: int = 0):
    """The model's parameters as the learner holds them (engine dtype, on the device), optionally
    perturbed by ``noise`` x N(0, 1)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name, p in model.named_parameters():
        t = p.detach()
        if noise:
            t = t + noise * torch.randn(t.shape, generator=gen, dtype=torch.float32).to(dtype)
        out.append((name, t.to(ctx.device).contiguous()))
    return out


def weights_stage(ctx: Context) -> dict:
    ctx.ensure_ray()
    model_dir = str(ctx.tiny().model_dir)
    original = learner_weights(ctx, model_dir)
    perturbed = learner_weights(ctx, model_dir, noise=0.01, seed=1)
    figures, changed = {}, {}
    for kind in ctx.smoke_transports():
        learner_side, actor_side = ctx.transport_pair(kind, f"smoke-w-{kind}")
        llm = ctx.engine(actor_side.llm_kwargs())
        actor_side.attach(f"smoke-{kind}-0", llm)
        before = checksum(llm)
        seconds = push(learner_side, actor_side, llm, perturbed, version=1, have=0)
        after = checksum(llm)
        back_s = push(learner_side, actor_side, llm, original, version=2, have=1)
        restored = checksum(llm)
        require(not math.isclose(after, before, rel_tol=1e-9, abs_tol=1e-9),
                f"{kind}: the engine's checksum did not change ({before!r}) after a perturbed version")
        require(math.isclose(restored, before, rel_tol=1e-9, abs_tol=1e-9),
                f"{kind}: loading the original weights back gave checksum {restored!r}, not {before!r}")
        changed[kind] = after
        figures[kind] = {"seconds": round(seconds, 3), "back_seconds": round(back_s, 3), "checksum_before": before,
                         "checksum_perturbed": after, "checksum_restored": restored}
    values = list(changed.values())
    if any(not math.isclose(v, values[0], rel_tol=1e-9, abs_tol=1e-9) for v in values):
        raise StageFailed(f"the transports loaded different weights: checksums {changed}")
    ctx.close_engine()
    nbytes = sum(t.numel() * t.element_size() for _, t in original)
    line = "; ".join(f"{k}: {v['seconds']:.2f} s, checksum {v['checksum_before']:.6g} -> "
                     f"{v['checksum_perturbed']:.6g} -> restored" for k, v in figures.items())
    return {"line": f"{nbytes / 2**20:.1f} MiB a version; {line}; transports agree", "bytes": nbytes,
            "transports": figures}
