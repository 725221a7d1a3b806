"""The async benchmark's two bounds, computed by hand: max(generation, training) and the machine's own
(a sync step's busy core-seconds spread over every core)."""

import pytest

from bench import async_vs_sync
from bench.async_vs_sync import BusyCores, async_bound


def test_bound_is_the_longer_of_generation_and_training(monkeypatch):
    monkeypatch.setattr(async_vs_sync.psutil, "cpu_count", lambda: 2)
    # sync: 15 steps, steady steps 1..14 take 1.7 s each = 1.0 s waiting for data + 0.6 s training (+ 0.1 s);
    # async: 1.25 s a steady step. Perfect overlap: max(1.0, 0.6) = 1.0 s, speedup 1.7; attained 1.0 / 1.25.
    # 1.2 core-s of work a step fits the cores in 1.0 s: the machine's bound is the same.
    sync = {"steady_wait_per_step_s": 1.0, "train_per_step_s": 0.6, "steady_s": 14 * 1.7, "steps": 15,
            "busy_core_s_per_step": 1.2}
    bound = async_bound(sync, {"steady_s": 14 * 1.25, "steps": 15})
    assert bound["bound_step_s"] == 1.0 and bound["sync_step_s"] == pytest.approx(1.7)
    assert bound["bound_speedup"] == pytest.approx(1.7) and bound["attained"] == pytest.approx(0.8)
    assert bound["attained_machine"] == pytest.approx(0.8) and bound["ceiling"] == 1.0
    # training-bound: the bound is the training time
    sync = {"steady_wait_per_step_s": 0.3, "train_per_step_s": 0.9, "steady_s": 9 * 1.2, "steps": 10,
            "busy_core_s_per_step": 1.2}
    assert async_bound(sync, {"steady_s": 9 * 0.9, "steps": 10})["attained"] == pytest.approx(1.0)


def _run(steady_s: float, wait: float, train: float, busy_per_step: float) -> dict:
    return {"steps": 11, "steady_s": steady_s, "steady_wait_per_step_s": wait, "train_per_step_s": train,
            "busy_core_s_per_step": busy_per_step}


def test_the_machine_bound_takes_over_when_the_work_does_not_fit_the_cores(monkeypatch):
    monkeypatch.setattr(async_vs_sync.psutil, "cpu_count", lambda: 2)
    # sync: generation 0.6 s + training 0.5 s a step, 1.8 core-s of work; async: 1.0 s a step
    b = async_bound(_run(11.0, 0.6, 0.5, 1.8), _run(10.0, 0.2, 0.7, 1.9))
    assert b["bound_step_s"] == pytest.approx(0.6) and b["attained"] == pytest.approx(0.6)
    assert b["work_step_s"] == pytest.approx(0.9) and b["machine_step_s"] == pytest.approx(0.9)
    assert b["attained_machine"] == pytest.approx(0.9)
    assert b["ceiling"] == pytest.approx(0.6 / 0.9)          # perfect packing: 2/3 of max(gen, train)


def test_the_issue_bound_stands_when_the_work_fits(monkeypatch):
    monkeypatch.setattr(async_vs_sync.psutil, "cpu_count", lambda: 4)
    b = async_bound(_run(11.0, 0.6, 0.5, 1.8), _run(8.0, 0.2, 0.7, 1.9))
    assert b["work_step_s"] == pytest.approx(0.45) and b["machine_step_s"] == pytest.approx(0.6)
    assert b["attained"] == b["attained_machine"] == pytest.approx(0.75) and b["ceiling"] == 1.0


def test_busy_cores_cover_the_steady_steps_and_charge_each_process(monkeypatch):
    clock, busy = iter([10.0, 11.0, 12.5]), iter([100.0, 101.6, 104.0])
    procs = iter([{1: ("ray::Actor", 5.0), 2: ("ray::Learner", 3.0)},          # step 0's end and the last's only
                  {1: ("ray::Actor", 6.2), 2: ("ray::Learner", 4.4), 3: ("ray::Late", 0.4)}])
    monkeypatch.setattr(async_vs_sync.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(async_vs_sync, "busy_core_seconds", lambda: next(busy))
    monkeypatch.setattr(async_vs_sync, "process_cpu_seconds", lambda: next(procs))
    cores = BusyCores(steps=3)
    assert cores.steady()["busy_cores"] != cores.steady()["busy_cores"]      # NaN before two steps
    for _ in range(3):
        cores(None, None, {})
    s = cores.steady()                 # steps 1 and 2: from the first step's end to the last's
    assert s["busy_cores"] == pytest.approx(4.0 / 2.5) and s["busy_core_s_per_step"] == pytest.approx(2.0)
    assert s["by_process"] == pytest.approx({"ray::Actor": 0.6, "ray::Learner": 0.7, "ray::Late": 0.2})


def test_process_titles_keep_a_ray_workers_class():
    assert async_vs_sync.process_title(["ray::GenerationActorImpl.run"]) == "ray::GenerationActorImpl"
    assert async_vs_sync.process_title(["ray::LearnerRank"]) == "ray::LearnerRank"
    assert async_vs_sync.process_title(["/usr/bin/python3", "-I", "/x/y/_math_verify_server.py", "--port"]) == \
        "python3 -I _math_verify_server.py"
    seen = async_vs_sync.process_cpu_seconds()          # this process at least
    assert seen and all(cpu >= 0 for _, cpu in seen.values())
