"""The GPU smoke command: every component lagrl needs, really exercised, in one process, in minutes.

    python -m launch.ops.smoke                       # on a GPU host: stages 1-6 (<= 8 min on one H100)
    python -m launch.ops.smoke --device cpu          # stages 1-5 on CPU (the default test run does this)
    python -m launch.ops.smoke --stages 1 2 3        # a subset; --out FILE for the JSON (default runs/smoke-*/)

One line per stage, ``[smoke] PASS|FAIL|SKIP <n> <name> (<seconds> s): <what it found>``, then the JSON
summary (also written to ``--out``). A failed stage does not stop the others; the exit code is 1 if any
failed. Tracebacks go to the JSON and to ``smoke-tracebacks.log`` beside it, not to the console.

1. versions: Python, torch (CUDA), vLLM, Ray, DeepSpeed, transformers, redis-server, math-verify, lagrl;
   the GPU's name and free memory; the package names are lagrl's (``launch.config.install_check``).
2. engine: the tiny model in a vLLM engine (``actors.engine.build_llm``; bf16 on GPU, fp32 on CPU) whose
   engine core runs in its own process generates with log-probs (finite, <= 0).
3. weights: a perturbed version and then the original pushed through each weight transport the placement
   allows (the Ray object store; the collective over gloo: one device cannot hold two NCCL ranks), with
   the learner's side in this process and the engine's poll as an actor does it; the engine's checksum
   must change, come back exactly, and agree between transports.
4. learner: one DeepSpeed update (``learner.engine.RankEngine``; bf16 on GPU, fp32 on CPU) at ZeRO-0 and
   ZeRO-2: loss and gradient norm finite, weights moved, the optimizer named, peak memory.
5. run: a 5-step tiny on-policy run through ``launch.run.driver`` (Ray actors, Redis, vLLM, DeepSpeed,
   math-verify): every trained token at lag 0; the behaviour/learner mismatch KL (``mismatch/start_kl_k3``:
   engine and learner log-probs of the same tokens, before the learner moves) and steps/s.
6. shapes (GPU only): Qwen2.5-1.5B's shapes with random weights (152K vocabulary, 1024-token responses):
   the actor's engine path (``GenerationActorImpl`` fed through Redis) against bare ``LLM.generate`` on the
   same prompts and engine; seconds per weight update per transport; ``RankEngine`` trained tokens/s
   against a bare DeepSpeed loop on the same batches.
"""
