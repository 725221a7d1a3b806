"""Real-size shapes on CPU: the full loop with Qwen2.5-0.5B's architecture (random weights, a
151,936-token vocabulary) and 512-token responses; peak memory per process, tokens/s, weight sync.

    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/real_size_shapes.py
    flock /tmp/lagrl-heavy.lock .venv/bin/python bench/real_size_shapes.py --steps 2 --out shapes.json

One actor (vLLM, bf16), one learner rank (DeepSpeed ZeRO-0, fp32, activation checkpointing), a
local Ray and a private redis-server, 2 groups x 4 responses per step (``launch/worlds/shapes/scale.py``
says what changes from the preset and why). The first build of the world takes ~30 s and 1 GB in
``$LAGRL_CACHE``; a run of 3 steps on 2 cores takes about 10 minutes.

How each figure is taken: the run is the ordinary driver (``launch.run.driver.run``) in this
process, on a local Ray. A sampler thread watches it from outside:

- memory: every second, the RSS and USS (pages no other process shares) of the driver (this
  process), each generation actor and each learner rank (pids from the run's ``placement.json``);
  at the end each process's peak RSS is its kernel high-water mark (``VmHWM``). The Ray object
  store (``/dev/shm``) and the whole machine (total - available) are sampled too, as growth over
  their level before the run;
- weight sync: the learner's seconds per publish (``time/weight_sync``: full weights out of
  DeepSpeed, into the object store, version announced) and, from the buffer, when each version
  appeared and when the actor's heartbeat (every 0.25 s) first reported serving it: publish ->
  served latency, an upper bound on the actor's load time (it includes up to one engine step).
  Bytes are the published tensors: parameters x the learner's element size;
- tokens/s: generation (responses of the run / the actor's busy time, and the actor's own
  average since start), learner (trained tokens / train seconds, per step).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = float(1 << 30)


def _status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (VmHWM: peak RSS; VmRSS: now); 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _machine_used() -> int:
    vm = psutil.virtual_memory()
    return vm.total - vm.available


def _shm_used() -> int:
    try:
        return shutil.disk_usage("/dev/shm").used
    except OSError:
        return 0


@dataclass
class ProcessPeak:
    role: str
    pid: int
    peak_rss: int = 0          # bytes (VmHWM, the kernel's high-water mark)
    peak_uss: int = 0          # bytes (sampled)

    def sample(self, with_uss: bool) -> None:
        self.peak_rss = max(self.peak_rss, _status_kib(self.pid, "VmHWM") * 1024)
        if with_uss:
            try:
                self.peak_uss = max(self.peak_uss, psutil.Process(self.pid).memory_full_info().uss)
            except psutil.Error:
                pass


@dataclass
class Sampler:
    """Background thread: process peaks, object store / machine growth, publish -> served times."""

    run_path: Path
    run_id: str
    period_s: float = 0.1
    procs: dict[int, ProcessPeak] = field(default_factory=dict)
    published_at: dict[int, float] = field(default_factory=dict)   # version -> wall time it was published
    served_at: dict[int, float] = field(default_factory=dict)      # version -> first heartbeat serving it
    last_beats: dict[str, dict] = field(default_factory=dict)      # actor -> its last heartbeat seen
    actor_pids: dict[str, list[int]] = field(default_factory=dict)  # actor -> pid of each incarnation (Ray restarts)
    base_machine: int = field(default_factory=_machine_used)
    base_shm: int = field(default_factory=_shm_used)
    peak_machine: int = 0
    peak_shm: int = 0

    def __post_init__(self):
        self.procs[os.getpid()] = ProcessPeak("driver", os.getpid())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="shapes-sampler")
        self._monitor = None

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(self.period_s):
            tick += 1
            self._find_processes()
            for p in self.procs.values():
                p.sample(with_uss=tick % int(1 / self.period_s) == 0)
            self.peak_machine = max(self.peak_machine, _machine_used() - self.base_machine)
            self.peak_shm = max(self.peak_shm, _shm_used() - self.base_shm)
            self._watch_versions()

    def _find_processes(self) -> None:
        placement = self.run_path / "placement.json"
        if len(self.procs) > 1 or not placement.exists():
            return
        p = json.loads(placement.read_text())
        for name, where in p.get("actors", {}).items():
            self.procs[where["pid"]] = ProcessPeak(f"actor {name}", where["pid"])
        for r, where in enumerate(p.get("learner", [])):
            self.procs[where["pid"]] = ProcessPeak(f"learner rank {r}", where["pid"])

    def _watch_versions(self) -> None:
        if self._monitor is None:
            url_file = self.run_path / "redis_url.txt"
            if not url_file.exists():
                return
            from buffer.monitor import Monitor
            self._monitor = Monitor(url_file.read_text().strip(), self.run_id)
        try:
            v = self._monitor.version()
            if v["version"] > 0 and v["version"] not in self.published_at:
                self.published_at[v["version"]] = v["time"] or time.time()
            beats = self._monitor.actors()
            self.last_beats.update(beats)
            for name, beat in beats.items():      # an actor Ray restarted (e.g. after an OOM kill) has a new pid
                pids = self.actor_pids.setdefault(name, [])
                if beat.get("pid") and beat["pid"] not in pids:
                    pids.append(beat["pid"])
                    if beat["pid"] not in self.procs:
                        self.procs[beat["pid"]] = ProcessPeak(f"actor {name} (incarnation {len(pids)})", beat["pid"])
            for beat in beats.values():
                served = int(beat.get("version", 0))
                if served in self.published_at and served not in self.served_at:
                    self.served_at[served] = float(beat.get("time", time.time()))
        except Exception:          # the run's Redis stopping at the end
            pass


def published_bytes(model_dir: Path, element_bytes: int) -> tuple[int, int]:
    """(parameters, bytes of one published version): the checkpoint's tensor sizes x element size."""
    from safetensors import safe_open

    params = 0
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                shape = st.get_slice(name).get_shape()
                n = 1
                for d in shape:
                    n *= d
                params += n
    return params, params * element_bytes


def _learner_logprob_path() -> str:
    """The log-prob function the learner's engine calls (its module binding, so a swap to another
    implementation shows here)."""
    from learner import engine

    fn = engine.logprobs_and_entropy
    return f"{fn.__module__}.{fn.__qualname__}"


def figures(cfg, result, sampler: Sampler, model_dir: Path) -> dict:
    """The measured figures of a finished shapes run (JSON-able)."""
    rows = result.metrics
    params, sync_bytes = published_bytes(model_dir, 4 if cfg.learner.dtype in ("auto", "fp32") else 2)
    latency = [sampler.served_at[v] - sampler.published_at[v] for v in sorted(sampler.served_at)]
    train_tokens = [float(m["tokens/trained"]) for m in rows]
    train_s = [float(m["time/train"]) for m in rows]
    beats = sampler.last_beats
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    lc = cfg.learner
    return {
        "model": {"parameters": params, "vocab_size": vocab, "dir": str(model_dir)},
        "run": {"steps": len(rows), "seconds": round(result.seconds, 1), "group_size": cfg.group_size,
                "rollout_batch": lc.batch.rollout_batch, "response_budget": cfg.data.stages[-1].max_tokens,
                "response_length_mean": [round(float(m.get("length/mean", 0)), 1) for m in rows],
                "truncation_rate": [round(float(m.get("truncation/rate", 0)), 3) for m in rows]},
        "memory_gib": {
            "processes": [{"role": p.role, "pid": p.pid, "peak_rss": round(p.peak_rss / GIB, 2),
                           "peak_uss": round(p.peak_uss / GIB, 2)} for p in sampler.procs.values()],
            "object_store_growth": round(sampler.peak_shm / GIB, 2),
            "machine_growth": round(sampler.peak_machine / GIB, 2),
            "machine_total": round(psutil.virtual_memory().total / GIB, 1)},
        "logprobs": {"path": _learner_logprob_path(),
                     "chunk_tokens": lc.loss.logprob_chunk_size, "micro_batch_tokens": lc.micro_batch_tokens,
                     "chunk_fp32_gib": round(lc.loss.logprob_chunk_size * vocab * 4 / GIB, 2),
                     "logits_fp32_gib_per_micro_batch": round(lc.micro_batch_tokens * vocab * 4 / GIB, 2),
                     "gradient_checkpointing": lc.gradient_checkpointing},
        "weight_sync": {"bytes": sync_bytes, "gib": round(sync_bytes / GIB, 2),
                        "publish_s": [round(float(m["time/weight_sync"]), 2) for m in rows],
                        "publish_to_served_s": [round(x, 2) for x in latency]},
        "tokens_per_s": {
            "learner_per_step": [round(t / max(s, 1e-9), 1) for t, s in zip(train_tokens, train_s)],
            "learner_trained_tokens": train_tokens, "learner_train_s": [round(s, 1) for s in train_s],
            "actors_since_start": {a: round(float(b.get("tokens_per_s", 0)), 1) for a, b in beats.items()},
            "actor_incarnations": {a: len(pids) for a, pids in sampler.actor_pids.items()},
            "step_s": [round(float(m["time/step"]), 1) for m in rows]},
    }


def measure(argv: list[str], default_preset: str = "onpolicy") -> dict:
    """Run ``--shapes`` with ``argv`` overrides in this process and return :func:`figures`."""
    from launch.run.compose import build_config
    from launch.run.driver import run
    from launch.worlds.shapes.build import ensure_shapes_world

    cfg, _ = build_config(["--shapes", "--actors.heartbeat_s", "0.25", *argv], default_preset=default_preset)
    world = ensure_shapes_world()
    sampler = Sampler(cfg.path.resolve(), cfg.run_id).start()
    try:
        result = run(cfg)
    finally:
        sampler.stop()
    out = figures(cfg, result, sampler, Path(cfg.data.model_dir or world.model_dir))
    (result.run_path / "shapes.json").write_text(json.dumps(out, indent=1))
    return out


def table(f: dict) -> str:
    """The figures as the README's Markdown rows."""
    mem = f["memory_gib"]
    procs = ", ".join(f"{p['role']} {p['peak_rss']:.2f} (USS {p['peak_uss']:.2f})" for p in mem["processes"])
    ws, tp, lp = f["weight_sync"], f["tokens_per_s"], f["logprobs"]
    return "\n".join([
        "| what | figure |", "|---|---|",
        f"| model | {f['model']['parameters']:,} parameters, vocabulary {f['model']['vocab_size']:,} |",
        f"| run | {f['run']['steps']} steps in {f['run']['seconds']:.0f} s; {f['run']['rollout_batch']} groups x "
        f"{f['run']['group_size']} responses; mean response length {f['run']['response_length_mean']} "
        f"(budget {f['run']['response_budget']}) |",
        f"| peak memory per process, GiB (RSS high-water mark) | {procs} |",
        f"| object store / machine growth, GiB | {mem['object_store_growth']:.2f} / {mem['machine_growth']:.2f} "
        f"of {mem['machine_total']:.0f} |",
        f"| log-prob path | {lp['path']}, {lp['chunk_tokens']}-token chunks ({lp['chunk_fp32_gib']} GiB fp32 each), "
        f"{lp['micro_batch_tokens']}-token micro-batches (logits {lp['logits_fp32_gib_per_micro_batch']} GiB), "
        f"activation checkpointing {'on' if lp['gradient_checkpointing'] else 'off'} |",
        f"| weight sync | {ws['gib']:.2f} GiB per version; publish {ws['publish_s']} s; "
        f"publish -> actor serving {ws['publish_to_served_s']} s |",
        f"| tokens/s | learner {tp['learner_per_step']} per step; actor {tp['actors_since_start']} "
        f"(average since start; incarnations {tp['actor_incarnations']}); step {tp['step_s']} s |",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--preset", default="onpolicy")
    ap.add_argument("--run_dir", default=None, help="parent of the run directory (default: a temp dir)")
    ap.add_argument("--out", default=None, help="also write the figures here (JSON)")
    args, extra = ap.parse_known_args()

    run_dir = args.run_dir or tempfile.mkdtemp(prefix="lagrl-shapes-")
    measured = measure(["--steps", str(args.steps), "--run_dir", run_dir,
                        "--run_id", time.strftime("shapes-%Y%m%d-%H%M%S"), *extra], default_preset=args.preset)
    print(json.dumps(measured, indent=1))
    print(table(measured))
    if args.out:
        Path(args.out).write_text(json.dumps(measured, indent=1))


if __name__ == "__main__":
    main()
