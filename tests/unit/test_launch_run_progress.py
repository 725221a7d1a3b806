"""The per-step console line's ETA: steps left at the mean step time, capped by the wall-clock deadline."""

from launch.run import progress as progress_mod
from launch.run.progress import Progress


def _clock(monkeypatch, now: list[float]) -> None:
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])


def _eta(line: str) -> str:
    return line.rsplit("|", 1)[1].strip()


def test_eta_is_steps_left_times_the_mean_step_time(monkeypatch):
    now = [100.0]
    _clock(monkeypatch, now)
    p = Progress(total_steps=10)
    now[0] = 120.0                          # 2 steps in 20 s: 10 s/step, 8 left -> 80 s
    assert _eta(p.line({"step": 1, "version": 2, "mode": "on_policy"})) == "10.0s/step ETA 1.3 min"


def test_a_resumed_run_counts_only_its_own_steps(monkeypatch):
    now = [0.0]
    _clock(monkeypatch, now)
    p = Progress(total_steps=10, start_step=6)
    now[0] = 30.0                           # steps 7 and 8 in 30 s: 15 s/step, 2 left -> 30 s
    assert _eta(p.line({"step": 7, "version": 8, "mode": "on_policy"})) == "15.0s/step ETA 0.5 min"


def test_the_wall_clock_deadline_caps_the_eta(monkeypatch):
    now = [0.0]
    _clock(monkeypatch, now)
    p = Progress(total_steps=100_000, deadline=600.0)
    now[0] = 540.0                          # 100 steps at 5.4 s/step would be days; the deadline is 60 s away
    assert _eta(p.line({"step": 99, "version": 100, "mode": "off_policy"})) == "5.4s/step ETA 1.0 min"
    now[0] = 700.0                          # past the deadline: the driver stops at the next check
    assert _eta(p.line({"step": 100, "version": 101, "mode": "off_policy"})) == "6.9s/step ETA 0.0 min"


def test_startup_clock_gives_each_phase_the_time_since_the_previous_mark(monkeypatch):
    import launch.run.progress as progress

    now = iter([110.0, 135.5, 136.0])        # ray ends at 110, the learner at 135.5, engines at 136
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(now))
    clock = progress.StartupClock(started=100.0)
    for phase in ("ray", "learner", "engines ready"):
        clock.mark(phase)
    assert clock.phases == {"ray": 10.0, "learner": 25.5, "engines ready": 0.5}
    assert clock.line() == "[driver] started in 36.0 s: ray 10.0, learner 25.5, engines ready 0.5"
