"""Sweeps that survive their driver's death, resumes that never go back in time, bad sweep files
caught before the first run: the output-folder lock under contention, workers that die with
their driver, per-run locks, resolved settings (``_base_`` pieces included), duplicated rows in
results.csv, seeds and image sizes checked up front, YAML errors that name the line, and a Ray
cluster that does not outlive its sweep."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from helpers.ablate import TINY_SET, write_sweep
from helpers.files import read_csv
from helpers.paths import REPO

from visattn.ablate import load_sweep, run_sweep
from visattn.ablate.__main__ import main as ablate_main
from visattn.locks import SWEEP_LOCK as LOCK
from visattn.locks import SweepLock

MULTIPROCESS = pytest.mark.xdist_group("multiprocess")
VARIANTS = [
    {"name": "none", "set": {"model.attention": None}},
    {"name": "se", "set": {"model.attention": {"name": "se"}}},
]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --------------------------------------------------------------------------- the sweep lock


def _contend(out: str, start, results, release) -> None:
    start.wait()
    try:
        SweepLock(out).acquire()
    except RuntimeError:
        results.put("refused")
        return
    results.put("acquired")
    release.wait(60)  # hold it (alive) until every contender has tried


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_the_sweep_lock_goes_to_exactly_one_of_many_simultaneous_contenders(
    tmp_path: Path, stale: bool
) -> None:
    ctx = mp.get_context("fork")
    trials, contenders = 25, 6
    winners = []
    for trial in range(trials):
        out = tmp_path / f"t{trial}"
        out.mkdir()
        if stale:  # every contender sees a lock whose owner is gone and tries to take it over
            (out / LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid()}))
        start, release, results = ctx.Event(), ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_contend, args=(str(out), start, results, release))
            for _ in range(contenders)
        ]
        for p in procs:
            p.start()
        start.set()
        try:
            got = [results.get(timeout=60) for _ in procs]
        finally:
            release.set()
            for p in procs:
                p.join(30)
        winners.append(got.count("acquired"))
    assert winners == [1] * trials


# --------------------------------------------------------------------------- per-run locks


def test_a_run_folder_held_by_a_live_process_is_not_trained_into(tmp_path: Path, fake) -> None:
    """The driver's lock is stale (it was killed), but a worker it left still trains none/seed0:
    the run's own lock, judged by the worker's pid and host, keeps a second sweep out."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        out = tmp_path / "out"
        (out / "runs" / "none").mkdir(parents=True)
        host = socket.gethostname()
        (out / LOCK).write_text(json.dumps({"host": host, "pid": _dead_pid()}))
        (out / "runs" / "none" / ".seed0.lock").write_text(
            json.dumps({"host": host, "pid": sleeper.pid})
        )
        path = write_sweep(tmp_path, VARIANTS, seeds=(0,))
        stale = pytest.warns(UserWarning, match="stale sweep lock")
        with stale, pytest.raises(RuntimeError, match=rf"none/seed0 .*pid {sleeper.pid}"):
            run_sweep(path, out, train_fn=fake, echo=lambda s: None)
        assert fake.calls == []
        assert not (out / "runs" / "none" / "seed0").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_run_lock_whose_process_is_gone_is_taken_over(tmp_path: Path, fake) -> None:
    out = tmp_path / "out"
    (out / "runs" / "none").mkdir(parents=True)
    lock = out / "runs" / "none" / ".seed0.lock"
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid()}))
    path = write_sweep(tmp_path, VARIANTS, seeds=(0,))
    rows = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert not lock.exists()  # released when the run finished


# --------------------------------------------------------------------------- driver death


def _proc_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process (Linux /proc)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def _descendants(pid: int) -> set[int]:
    table = _proc_table()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (pp, _) in table.items() if pp in frontier} - found
        found |= frontier
    return found


def _running(pids: set[int]) -> set[int]:
    table = _proc_table()
    return {p for p in pids if p in table and table[p][1] not in ("Z", "X")}


def _long_sweep(tmp_path: Path) -> Path:
    data = {
        "name": "long",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": [0],
        "set": {**TINY_SET, "trainer.max_epochs": 10_000, "trainer.limit_val_batches": 1},
        "variants": VARIANTS,
        "localization": False,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _ablate_cmd(tmp_path: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "visattn.ablate", str(_long_sweep(tmp_path)), "--out", str(out)]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGTERM, marks=pytest.mark.heavy), signal.SIGKILL],
    ids=["SIGTERM", "SIGKILL"],
)
@MULTIPROCESS
def test_jobs_workers_die_with_their_driver(tmp_path: Path, sig: signal.Signals) -> None:
    pytest.importorskip("visattn.training.cli")
    out = tmp_path / "out"
    log = open(tmp_path / "driver.log", "wb")  # noqa: SIM115 (closed below)
    driver = subprocess.Popen(
        [*_ablate_cmd(tmp_path, out), "--jobs", "2", "--threads", "1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and driver.poll() is None:
            workers |= _descendants(driver.pid)
            trained = list((out / "runs").glob("*/seed0/lightning_logs/version_0/metrics.csv"))
            if len(trained) == 2:  # both workers are in their training loops
                break
            time.sleep(0.5)
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        workers |= _descendants(driver.pid)
        assert len(workers) >= 2
        os.kill(driver.pid, sig)
        driver.wait(timeout=120)
        deadline = time.monotonic() + 60
        while _running(workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _running(workers) == set(), "workers outlived their driver"
        if sig == signal.SIGTERM:  # handled like Ctrl+C: the sweep lock is released
            assert driver.returncode != 0 and not (out / LOCK).exists()
    finally:
        for pid in _running(workers) | ({driver.pid} if driver.poll() is None else set()):
            os.kill(pid, signal.SIGKILL)
        driver.wait(timeout=30)
        log.close()


# --------------------------------------------------------------------------- resolved settings


def test_a_change_in_a_base_configs_base_piece_reruns_and_names_the_key(
    tmp_path: Path,
    fake,
) -> None:
    piece = tmp_path / "pieces" / "schedule.yaml"
    piece.parent.mkdir()
    piece.write_text("model:\n  lr: 0.1\ntrainer:\n  gradient_clip_val: 1.0\n")
    top = tmp_path / "top.yaml"
    top.write_text("_base_: [pieces/schedule.yaml]\ntrainer:\n  max_epochs: 1\n")
    data = {"name": "pieces", "base": [str(top)], "seeds": [0], "variants": VARIANTS}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert len(fake.calls) == 2
    piece.write_text("model:\n  lr: 0.05\ntrainer:\n  gradient_clip_val: 1.0\n")
    lines: list[str] = []
    fake.calls.clear()
    run_sweep(path, out, train_fn=fake, echo=lines.append, retrain_changed=True)
    assert len(fake.calls) == 2
    changed = [ln for ln in lines if "settings changed" in ln]
    assert len(changed) == 2 and all("model.lr: 0.1 -> 0.05" in ln for ln in changed), lines


# --------------------------------------------------------------------------- --report-only


def test_report_only_does_not_count_a_duplicated_row_as_another_pair(
    tmp_path: Path,
    fake,
    capsys: pytest.CaptureFixture,
) -> None:
    path = write_sweep(tmp_path, VARIANTS)
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    good = read_csv(out / "results.csv")
    lines = (out / "results.csv").read_text().splitlines(True)
    (out / "results.csv").write_text("".join([*lines, lines[-1], lines[1]]))
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    said = capsys.readouterr().out
    assert "duplicate" in said and "rebuilt from 4 completion markers" in said
    assert read_csv(out / "results.csv") == good
    assert "Runs: 4 ok, 0 failed" in (out / "report.md").read_text()
    # without markers to rebuild from, it refuses and names the pair
    for marker in (out / "runs").glob("*/seed*/result.json"):
        marker.unlink()
    (out / "results.csv").write_text("".join([*lines, lines[-1]]))
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 2
    assert "duplicate" in capsys.readouterr().err


# --------------------------------------------------------------------------- up-front checks


@pytest.mark.parametrize("seeds", [[-1], [2**32], [1e20], ["0"], [0, 1.5]])
def test_seeds_out_of_range_or_not_ints_are_refused(tmp_path: Path, seeds: list) -> None:
    path = write_sweep(tmp_path, VARIANTS, seeds=seeds)
    with pytest.raises(ValueError, match=r"seeds? .*(0 and 4294967295|int)"):
        load_sweep(path)


def test_an_image_size_too_small_for_the_data_fails_before_the_first_run(
    tmp_path: Path,
    fake,
) -> None:
    pytest.importorskip("visattn.training.cli")
    data = {
        "name": "small",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": [0],
        "set": {**TINY_SET},
        "variants": [
            {"name": "ok", "set": {"model.attention": None}},
            {"name": "tiny", "set": {"model.attention": None, "data.image_size": 8}},
        ],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ValueError, match=r"variant 'tiny': .*image_size"):
        run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None, validate=True)
    assert fake.calls == []


def test_a_download_that_fails_is_tried_once_and_reported_once_for_every_variant(
    tmp_path: Path, fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three variants share one CIFAR-10 folder to download into and no network: the check
    tries the download once and says so in one line, not three."""
    pytest.importorskip("visattn.training.cli")
    import urllib.error
    import urllib.request

    tries = []

    def offline(*args: object, **kwargs: object) -> None:
        tries.append(args)
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    data = {
        "name": "offline",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": [0, 1],
        "set": {
            **TINY_SET,
            "data.dataset": "cifar10",
            "data.root": str(tmp_path / "data"),
            "data.download": True,
        },
        "variants": [
            {"name": "plain", "set": {"model.attention": None}},
            {"name": "se", "set": {"model.attention": {"name": "se"}}},
            {"name": "eca", "set": {"model.attention": {"name": "eca"}}},
        ],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ValueError) as info:
        run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None, validate=True)
    lines = str(info.value).splitlines()
    assert "3 variant(s) would fail before training" in lines[0] and len(lines) == 2
    assert lines[1].startswith("  every variant (3): ConnectionError: cifar10: could not")
    assert len(tries) == 1 and fake.calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_processes_started_under_the_reaper_die_with_a_sigkilled_parent(tmp_path: Path) -> None:
    pytest.importorskip("ray")  # the reaper serves the Ray executor
    from visattn.ablate.executors import reaped_on_exit

    code = (
        "import subprocess, sys, time\n"
        "from visattn.ablate.executors import reaped_on_exit\n"
        "with reaped_on_exit():\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=_env())
    try:
        child = int(parent.stdout.readline())
        assert _running({child}) == {child}
        parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 30
        while _running({child}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _running({child}) == set()
    finally:
        if parent.poll() is None:
            parent.kill()
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            os.kill(child, signal.SIGKILL)
    with reaped_on_exit():  # a normal exit ends them too
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    assert sleeper.wait(timeout=30) == -signal.SIGKILL


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nseeds: [0, 1\nvariants:\n  - {name: a}\n")
    with pytest.raises(ValueError, match=r"broken\.yaml.* line [23]") as err:
        load_sweep(path)
    assert "<unicode string>" not in str(err.value)


# --------------------------------------------------------------------------- Ray


def _tagged(tag: str) -> set[int]:
    """Processes whose environment carries ``tag`` (everything a sweep started inherits it)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                found.add(int(entry.name))
        except OSError:
            continue
    return _running(found)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGTERM, marks=pytest.mark.heavy), signal.SIGKILL],
    ids=["SIGTERM", "SIGKILL"],
)
@MULTIPROCESS
def test_a_ray_sweep_whose_driver_is_stopped_leaves_no_ray_process(
    tmp_path: Path, sig: signal.Signals
) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("visattn.training.cli")
    tag = f"VISATTN_RAY_TEST={uuid.uuid4().hex}"
    out = tmp_path / "out"
    env = {**_env(), tag.split("=")[0]: tag.split("=")[1]}
    log = open(tmp_path / "driver.log", "wb")  # noqa: SIM115 (closed below)
    driver = subprocess.Popen(
        [*_ablate_cmd(tmp_path, out), "--executor", "ray", "--jobs", "1", "--threads", "1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and driver.poll() is None:
            if list((out / "runs").glob("*/seed0/lightning_logs/version_0/metrics.csv")):
                break
            time.sleep(0.5)
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
        assert len(_tagged(tag)) > 2  # the driver, Ray's daemons and a worker
        os.kill(driver.pid, sig)
        driver.wait(timeout=120)
        deadline = time.monotonic() + 60
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in _tagged(tag)}
        assert left == {}, f"Ray processes outlived the sweep: {left}"
    finally:
        for pid in _tagged(tag):
            os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
        driver.wait(timeout=30)
        log.close()


def test_another_sweep_pointed_at_a_finished_folder_is_refused_unless_told(
    tmp_path: Path, fake
) -> None:
    """P3: a folder belongs to the sweep that made it; a typo in --out must not replace its
    finished runs and rewrite its report under another name."""
    from visattn.ablate.runner import OWNER_FILE, SweepFolderTaken

    out = tmp_path / "out"
    first = write_sweep(tmp_path, VARIANTS, seeds=(0,))
    run_sweep(first, out, train_fn=fake, echo=lambda s: None)
    assert json.loads((out / OWNER_FILE).read_text()) == {"sweep": "tiny"}
    report = (out / "report.md").read_text()
    other = tmp_path / "other"
    other.mkdir()
    second = write_sweep(other, VARIANTS, seeds=(0,), name="other")
    calls = len(fake.calls)
    for dry_run in (True, False):
        with pytest.raises(SweepFolderTaken, match=r"sweep 'tiny', not of 'other'.*--take-over"):
            run_sweep(second, out, train_fn=fake, echo=lambda s: None, dry_run=dry_run)
    assert ablate_main([str(second), "--out", str(out), "--report-only"]) == 2
    assert len(fake.calls) == calls and (out / "report.md").read_text() == report
    # a folder from before the owner file is known by its report's title
    (out / OWNER_FILE).unlink()
    with pytest.raises(SweepFolderTaken):
        run_sweep(second, out, train_fn=fake, echo=lambda s: None)
    run_sweep(first, out, train_fn=fake, echo=lambda s: None)  # its own sweep resumes
    assert len(fake.calls) == calls and (out / OWNER_FILE).is_file()
    # said in so many words, the other sweep takes the folder over
    run_sweep(second, out, train_fn=fake, echo=lambda s: None, take_over=True)
    assert json.loads((out / OWNER_FILE).read_text()) == {"sweep": "other"}
