"""The workers' start gate: each says it is loaded and waits; the supervisor opens it for all."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.adapters.workers import GATE_ENV, Supervisor, pass_gate, worker_command
from sidecar.settings import Settings


class FakeTime:
    def __init__(self, on_sleep: object = None) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if callable(self.on_sleep):
            self.on_sleep(self.sleeps)


def test_without_a_gate_a_worker_starts_at_once() -> None:
    fake = FakeTime()
    assert pass_gate(0, {}, sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == 0


def test_a_worker_says_it_is_loaded_and_waits_until_the_gate_opens(tmp_path: Path) -> None:
    def open_after_five(sleeps: int) -> None:
        assert (tmp_path / "loaded-3").exists()  # said before waiting
        if sleeps == 5:
            (tmp_path / "open").touch()

    fake = FakeTime(open_after_five)
    assert pass_gate(3, {GATE_ENV: str(tmp_path)}, sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == 5


def test_a_gate_that_stays_shut_lets_the_worker_start_after_the_timeout(tmp_path: Path) -> None:
    fake = FakeTime()
    passed = pass_gate(
        0, {GATE_ENV: str(tmp_path)}, timeout_s=1.0, sleep=fake.sleep, clock=fake.clock
    )
    assert not passed
    assert 1.0 <= fake.now < 1.1


def test_a_worker_started_again_later_finds_the_gate_open(tmp_path: Path) -> None:
    (tmp_path / "open").touch()
    fake = FakeTime()
    assert pass_gate(1, {GATE_ENV: str(tmp_path)}, sleep=fake.sleep, clock=fake.clock)
    assert fake.sleeps == 0


def _supervisor(tmp_path: Path, workers: int) -> Supervisor:
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "gate").mkdir()
    (tmp_path / "metrics" / "gate" / "open").touch()  # left by an earlier run
    return Supervisor(Settings(), ["true"], workers, metrics_dir=tmp_path / "metrics")


async def test_the_supervisor_opens_the_gate_when_every_worker_is_loaded(tmp_path: Path) -> None:
    supervisor = _supervisor(tmp_path, 2)
    assert not (supervisor.gate / "open").exists()  # an earlier run's gate is cleared
    assert supervisor._env(1)[GATE_ENV] == str(supervisor.gate)
    opener = asyncio.create_task(supervisor._open_gate(timeout_s=30))
    (supervisor.gate / "loaded-0").touch()
    await asyncio.sleep(0.1)
    assert not (supervisor.gate / "open").exists()  # one of two loaded
    (supervisor.gate / "loaded-1").touch()
    await asyncio.wait_for(opener, 5)
    assert (supervisor.gate / "open").exists()


async def test_the_supervisor_opens_the_gate_after_the_timeout(tmp_path: Path) -> None:
    supervisor = _supervisor(tmp_path, 2)
    (supervisor.gate / "loaded-0").touch()
    await asyncio.wait_for(supervisor._open_gate(timeout_s=0.2), 5)
    assert (supervisor.gate / "open").exists()


async def test_a_worker_that_exits_is_started_again_after_a_doubling_back_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import sidecar.adapters.workers as workers

    monkeypatch.setattr(workers, "BACKOFF_BASE_S", 0.05)
    (tmp_path / "metrics").mkdir()
    supervisor = Supervisor(
        Settings(),
        [sys.executable, "-c", "raise SystemExit(3)"],
        1,
        metrics_dir=tmp_path / "metrics",
    )
    (worker,) = supervisor.workers
    started = asyncio.get_running_loop().time()
    keeping = asyncio.ensure_future(supervisor._keep(worker))
    for _ in range(500):
        if len(worker.exit_codes) >= 3:
            break
        await asyncio.sleep(0.02)
    supervisor._stopping.set()
    await asyncio.wait_for(keeping, 5)

    assert worker.exit_codes[:3] == [3, 3, 3]
    assert supervisor.restarts._value.get() >= 3
    # Waited 0.05 s, then 0.1 s between the three starts at least.
    assert asyncio.get_running_loop().time() - started >= 0.15


def test_a_worker_imports_the_installed_package_from_a_folder_holding_a_sidecar_dir(
    tmp_path: Path,
) -> None:
    # A user's folder with an unrelated sidecar/ package that cannot be imported.
    bogus = tmp_path / "sidecar"
    bogus.mkdir()
    (bogus / "__init__.py").write_text('raise ImportError("the bogus sidecar was imported")\n')
    missing = tmp_path / "missing.yaml"
    command = worker_command(missing, "info")
    # Plain `python -m sidecar` from there imports the bogus package: what the fix avoids.
    plain = subprocess.run(
        [sys.executable, "-m", "sidecar", *command[command.index("sidecar") + 1 :]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "the bogus sidecar was imported" in plain.stderr
    # The worker's command runs the installed sidecar: it reads the configuration and
    # says what is wrong with it (here: no such file).
    worker = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "bogus" not in worker.stderr, worker.stderr
    assert f"{missing}: cannot read configuration" in worker.stderr, worker.stderr
    assert worker.returncode == 2
