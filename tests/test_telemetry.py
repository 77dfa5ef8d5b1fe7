"""Energy and device telemetry (orchestrator/telemetry/): the sampler against a stand-in NVML
module and a stand-in powercap tree, phase attribution, the harness's phase spans, the real NVML
and powercap path of this host, and a cell through the real local backend."""
import json
import types
from pathlib import Path

import pytest

from orchestrator.run_settings import RunSettings
from orchestrator import frameworks, host, telemetry
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.docker import DockerBackend
from orchestrator.runner import run_cells
from workloads.common.harness import Run
from workloads.common.result import Cell, Result
from support.records import measured

REGISTRY = frameworks.discover()


# --- a stand-in NVML module: power as a function of a clock the test sets -------------------------

class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def power_w(t: float) -> float:
    """50 W idle until t=101, a ramp to 300 W over the first second of the cell, then 300 W."""
    if t <= 101:
        return 50.0
    if t <= 102:
        return 50.0 + 250.0 * (t - 101)
    return 300.0


def energy_j(t: float) -> float:
    """The integral of power_w from t=0: what a GPU's total-energy counter reports."""
    joules = 50.0 * min(t, 101)
    if t > 101:
        ramp = min(t, 102) - 101
        joules += 50.0 * ramp + 125.0 * ramp ** 2
    if t > 102:
        joules += 300.0 * (t - 102)
    return joules


class NVMLError(Exception):
    pass


def stand_in_nvml(clock: Clock, *, counter: bool = True, driver: bool = True, gpus: int = 1):
    """What NVML answers for `gpus` GPUs drawing power_w each (with or without an energy counter)."""
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError
    module.NVML_CLOCK_SM, module.NVML_TEMPERATURE_GPU = 1, 0
    module.nvmlClocksEventReasonGpuIdle = 0x1
    module.nvmlClocksEventReasonSwPowerCap = 0x4
    module.nvmlClocksEventReasonHwSlowdown = 0x8
    module.nvmlClocksEventReasonAll = 0xFF  # not one reason: never a name
    module.shutdowns = 0

    def init():
        if not driver:
            raise NVMLError("Driver Not Loaded")

    def energy(handle):
        if not counter:
            raise NVMLError("Not Supported")
        return int(energy_j(clock()) * 1000)  # millijoules

    def events(handle):
        return 0x1 if clock() < 101 else (0x4 | 0x10000 if clock() >= 105 else 0)

    module.nvmlInit = init
    module.nvmlShutdown = lambda: setattr(module, "shutdowns", module.shutdowns + 1)
    module.nvmlDeviceGetCount = lambda: gpus
    module.nvmlDeviceGetHandleByIndex = lambda index: ("gpu", index)
    module.nvmlDeviceGetHandleByUUID = lambda uuid: ("gpu", uuid)
    module.nvmlDeviceGetName = lambda handle: b"Stand-in GPU"
    module.nvmlDeviceGetTotalEnergyConsumption = energy
    module.nvmlDeviceGetPowerUsage = lambda handle: int(power_w(clock()) * 1000)  # milliwatts
    module.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=0 if clock() <= 101 else 90)
    module.nvmlDeviceGetClockInfo = lambda handle, kind: 1980 if clock() < 105 else 1500
    module.nvmlDeviceGetTemperature = lambda handle, sensor: 30 + (clock() - 100)
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=(2 if clock() <= 101 else 6) * 2 ** 30)
    module.nvmlDeviceGetCurrentClocksEventReasons = events
    return module


def training_result(spans=None) -> Result:
    """An ok training result: 10 steps of 8 samples, the first from 101 to 102, the rest until 111."""
    result = Result(cell=Cell("pytorch", "cnn", variant="cu130", profile="smoke", data="synthetic"))
    result.settings["batch_size"] = 8
    result.samples.epoch_steps = [10]
    result.samples.epoch_times_s = [10.0]
    result.phase_spans = spans if spans is not None else {
        "model_build": [[100.2, 100.4]],  # before the cell started (another clock?): left out
        "first_step": [[101.0, 102.0]], "steady": [[102.0, 111.0]], "train": [[101.0, 111.0]]}
    return result


def metered_cell(nvml, clock: Clock, *, powercap=None, idle_window_s: float = 1.0):
    """A cell from 101 to 111 as the meter sees it: started at 100 (then the idle window), read at
    every half second (the sampling thread's readings, placed by hand so the figures are exact)."""
    source = telemetry.Telemetry(nvml=nvml, powercap_root=powercap, idle_window_s=idle_window_s,
                                 gpu_interval_s=3600, cpu_interval_s=3600)  # the thread never reads by itself
    meter = source.meter(None, cuda=True, clock=clock, sleep=clock.sleep)
    clock.now = 100.0
    meter.start()
    assert meter.cell_start == 101.0
    while clock.now < 110.75:
        clock.now += 0.5
        meter._read()
    clock.now = 111.0
    meter.stop()
    return meter, source


@pytest.mark.parametrize("counter", [True, False], ids=["energy counter", "power integrated"])
def test_gpu_energy_gross_net_idle_phases_and_per_sample(counter):
    clock = Clock(100.0)
    nvml = stand_in_nvml(clock, counter=counter)
    meter, source = metered_cell(nvml, clock)
    record = meter.energy(training_result())
    gpu = record.gpu
    assert gpu.method == ("counter" if counter else "integration")
    assert (gpu.reason is None) == counter  # integration says so
    assert gpu.devices == ["0: Stand-in GPU"]
    # idle 50 W; the ramp's 175 J, then 9 s at 300 W (piecewise linear: trapezoids are exact)
    assert gpu.idle_w == pytest.approx(50.0)
    assert gpu.gross_j == pytest.approx(175.0 + 2700.0)
    assert gpu.net_j == pytest.approx(2875.0 - 50.0 * 10)
    assert gpu.duration_s == pytest.approx(10.0) and gpu.mean_w == pytest.approx(287.5)
    assert gpu.peak_w == pytest.approx(300.0)
    assert gpu.phase_j == pytest.approx({"first_step": 175.0, "steady": 2700.0, "train": 2875.0})
    assert "model_build" not in gpu.phase_j
    assert gpu.utilisation_max_pct == 90 and gpu.sm_clock_min_mhz == 1500 and gpu.sm_clock_mean_mhz < 1980
    assert gpu.max_temperature_c == pytest.approx(11 + 30)
    assert gpu.peak_memory_mb == pytest.approx(6 * 1024)
    # GpuIdle was only seen in the idle window, before the cell; an unnamed bit is shown as such
    assert gpu.throttle_reasons == ["SwPowerCap", "0x10000"]
    # steady: 9 steps x 8 samples
    assert (record.basis_phase, record.basis_samples, record.basis_devices) == ("steady", 72, ["gpu"])
    assert record.joules_per_sample == pytest.approx(2700.0 / 72)
    assert record.net_joules_per_sample == pytest.approx((2700.0 - 50.0 * 9) / 72)
    assert record.samples_per_joule == pytest.approx(72 / 2700.0)
    assert record.kwh == pytest.approx(2875.0 / 3.6e6)
    assert record.cpu.method == "none" and record.cpu.reason
    source.close()
    assert nvml.shutdowns == 1
    json.dumps(Result(cell=Cell("pytorch", "cnn"), energy=record).to_dict(), allow_nan=False)


def test_two_gpus_add_up_and_gpus_are_chosen_by_index():
    clock = Clock(100.0)
    source = telemetry.Telemetry(nvml=stand_in_nvml(clock, gpus=2), powercap_root=Path("/nonexistent"),
                                 gpu_interval_s=3600)
    meter = source.meter(["1", "0"], cuda=True, clock=clock, sleep=clock.sleep)
    assert [name.split(":")[0] for name in meter.gpus.names] == ["1", "0"]
    assert DockerBackend(REGISTRY, client=None, image_for=str, gpus="0,GPU-abc").gpus_given() == ["0", "GPU-abc"]
    assert LocalBackend(REGISTRY, gpus="2,3").gpus_given() == ["2", "3"]
    all_gpus, _ = metered_cell(stand_in_nvml(clock, gpus=2), clock)
    assert all_gpus.energy(training_result()).gpu.gross_j == pytest.approx(2 * 2875.0)


def test_without_a_driver_or_for_a_cpu_cell_nothing_is_sampled():
    clock = Clock(100.0)
    source = telemetry.Telemetry(nvml=stand_in_nvml(clock, driver=False), powercap_root=Path("/nonexistent"))
    meter = source.meter(None, cuda=True, clock=clock, sleep=clock.sleep)
    meter.start()
    assert meter._thread is None and clock.now == 100.0  # no thread, no idle wait
    meter.stop()
    record = meter.energy(training_result())
    assert record.gpu.method == "none" and "NVML did not start (Driver Not Loaded)" in record.gpu.reason
    assert record.gpu.gross_j is None and record.joules_per_sample is None and record.kwh is None
    assert record.reason == "no device's energy was measured"
    cpu_cell = source.meter(None, cuda=False, clock=clock, sleep=clock.sleep)
    assert cpu_cell.gpus is None and cpu_cell.gpu_reason == "a CPU cell: no GPU was given to it"


def test_a_result_without_phase_spans_gets_no_per_sample_figures_and_says_why():
    clock = Clock(100.0)
    meter, _ = metered_cell(stand_in_nvml(clock), clock)
    record = meter.energy(training_result(spans={}))
    assert record.gpu.gross_j == pytest.approx(2875.0) and record.gpu.phase_j == {}
    assert record.joules_per_sample is None and "no 'steady' span" in record.reason
    failed = training_result()
    failed.status = "failed"
    assert meter.energy(failed).reason == "the cell is failed: no per-sample figures"


def test_inference_is_measured_over_its_timed_batches():
    clock = Clock(100.0)
    meter, _ = metered_cell(stand_in_nvml(clock), clock, idle_window_s=1.0)
    result = Result(cell=Cell("pytorch", "resnet50", variant="cu130"))
    result.settings["batch_size"] = 16
    result.samples.batch_times_s = [0.5] * 10
    result.phase_spans = {"warmup": [[101.0, 104.0]], "inference": [[104.0, 109.0]]}
    record = meter.energy(result)
    assert (record.basis_phase, record.basis_samples) == ("inference", 160)
    assert record.joules_per_sample == pytest.approx(1500.0 / 160)


# --- a stand-in powercap tree ---------------------------------------------------------------------

def powercap_tree(root: Path, *, package_uj: int = 900_000, wrap_uj: int = 1_000_000) -> Path:
    """intel-rapl:0 (package-0) with its core and dram domains, and a psys zone (left out)."""
    for folder, name, value in (("intel-rapl:0", "package-0", package_uj), ("intel-rapl:0:0", "core", 5),
                                ("intel-rapl:0:1", "dram", 0), ("intel-rapl:1", "psys", 7)):
        (root / folder).mkdir(parents=True)
        (root / folder / "name").write_text(name + "\n")
        (root / folder / "energy_uj").write_text(f"{value}\n")
        (root / folder / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    return root


def test_rapl_counter_wraps_around_and_dram_is_added(tmp_path):
    root = powercap_tree(tmp_path / "powercap")
    rapl = telemetry.Rapl(root)
    assert rapl.names == ["package-0", "dram (intel-rapl:0:1)"]
    (root / "intel-rapl:0" / "energy_uj").write_text("100000\n")  # wrapped past 1 J: 0.2 J later
    (root / "intel-rapl:0:1" / "energy_uj").write_text("50000\n")
    assert rapl.read_j() == pytest.approx(0.2 + 0.05)
    (root / "intel-rapl:0" / "energy_uj").write_text("600000\n")
    assert rapl.read_j() == pytest.approx(0.75)


def test_rapl_measures_the_cpu_around_a_cell(tmp_path):
    root = powercap_tree(tmp_path / "powercap", package_uj=0, wrap_uj=10 ** 12)
    clock = Clock(100.0)
    package = root / "intel-rapl:0" / "energy_uj"

    def sleep(seconds):  # the idle window: 1 s at 20 W
        clock.sleep(seconds)
        package.write_text(f"{20 * 10 ** 6}\n")

    meter = telemetry.Telemetry(nvml=stand_in_nvml(clock), powercap_root=root, cpu_interval_s=3600) \
        .meter(None, cuda=False, clock=clock, sleep=sleep)
    meter.start()
    for now, joules in ((102.0, 20 + 60), (111.0, 20 + 60 + 9 * 60)):  # the cell: 60 W
        clock.now = now
        package.write_text(f"{joules * 10 ** 6}\n")
        if now < 111:
            meter._read()
    meter.stop()
    record = meter.energy(training_result())
    cpu = record.cpu
    assert (cpu.method, cpu.idle_w, cpu.gross_j) == ("counter", pytest.approx(20.0), pytest.approx(600.0))
    assert cpu.net_j == pytest.approx(600.0 - 200.0) and cpu.peak_w is None
    assert cpu.phase_j["steady"] == pytest.approx(540.0)
    assert record.basis_devices == ["cpu"] and record.joules_per_sample == pytest.approx(540.0 / 72)
    assert record.gpu.reason == "a CPU cell: no GPU was given to it"


def test_rapl_absent_missing_or_unreadable_says_why(tmp_path, monkeypatch):
    with pytest.raises(telemetry.Unmeasurable, match="no RAPL package zone under"):
        telemetry.Rapl(tmp_path / "empty")
    root = powercap_tree(tmp_path / "missing")
    (root / "intel-rapl:0:1" / "energy_uj").unlink()
    with pytest.raises(telemetry.Unmeasurable, match=r"intel-rapl:0:1/energy_uj is missing"):
        telemetry.Rapl(root)
    root = powercap_tree(tmp_path / "unreadable")
    locked = root / "intel-rapl:0" / "energy_uj"
    locked.chmod(0)
    real_read = Path.read_text

    def read_text(path, *args, **kwargs):  # as for a user who is not root (root reads mode 000 too)
        if path == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    meter = telemetry.Telemetry(powercap_root=root).meter(None, cuda=False)
    assert meter.rapl is None and "is not readable by this user" in meter.cpu_reason
    assert meter.energy(training_result()).cpu.method == "none"


def test_clock_event_bits_are_decoded_by_name():
    nvml = stand_in_nvml(Clock(0))
    names = telemetry.clock_event_names(nvml)
    assert names == {0x1: "GpuIdle", 0x4: "SwPowerCap", 0x8: "HwSlowdown"}
    assert telemetry.decode_clock_events(0x4 | 0x8 | 0x20, names) == ["SwPowerCap", "HwSlowdown", "0x20"]
    import pynvml  # the real bindings name every documented reason

    assert telemetry.clock_event_names(pynvml)[pynvml.nvmlClocksEventReasonSwPowerCap] == "SwPowerCap"


# --- the harness's phase spans --------------------------------------------------------------------

def test_the_harness_reports_wall_clock_spans_of_its_phases():
    import numpy as np

    run = Run(Cell("pytorch", "cnn", profile="smoke", data="synthetic"), data_dir="/nonexistent")
    with run.phase("model_build"):
        pass
    with run.phase("model_build"):
        pass
    x, y = np.zeros((200, 3, 32, 32), np.float32), np.arange(200) % 10
    for _ in range(2):
        for _batch in run.train_batches(x, y):
            pass
        run.end_epoch(1.0)
    spans = run.result.phase_spans
    assert len(spans["model_build"]) == 2 and len(spans["train"]) == 2 and len(spans["first_step"]) == 1
    assert spans["first_step"][0][0] == spans["train"][0][0]
    assert spans["steady"][0][0] == spans["first_step"][0][1] and spans["steady"][1] == spans["train"][1]
    assert all(start <= end for stretches in spans.values() for start, end in stretches)
    assert spans["model_build"][1][1] <= spans["train"][0][0]
    result = Result.from_dict(json.loads(json.dumps(run.finish().to_dict())))
    assert result.phase_spans == spans
    inference = Run(Cell("pytorch", "resnet50", profile="smoke", data="synthetic"), data_dir="/nonexistent")
    for _batch in inference.timed_batches(np.zeros((64, 1), np.float32)):
        pass
    assert len(inference.result.phase_spans["inference"]) == 1


# --- the real path on this host -------------------------------------------------------------------

def test_the_real_nvml_and_powercap_of_this_host():
    """pynvml loads here; where no driver answers the record says "none" and why, with no thread."""
    source = telemetry.Telemetry()
    meter = source.meter(None, cuda=True)
    meter.start()
    meter.stop()
    record = meter.energy(training_result())
    try:
        rapl_problem = None
        telemetry.Rapl()
    except telemetry.Unmeasurable as problem:
        rapl_problem = str(problem)
    if rapl_problem:
        assert (record.cpu.method, record.cpu.reason) == ("none", rapl_problem)
    else:
        assert record.cpu.method == "counter" and record.cpu.gross_j is not None
    if not host.gpus():
        assert record.gpu.method == "none"
        assert record.gpu.reason.startswith("NVML did not start (") and "no NVIDIA driver" in record.gpu.reason
        assert meter._thread is None or rapl_problem is None
    else:
        assert record.gpu.method in ("counter", "integration") and record.gpu.gross_j is not None
    source.close()


def test_a_cell_through_the_local_backend_gets_its_energy_record(tmp_path, monkeypatch, fake_interpreter):
    """The runner's serial dispatch meters each cell: here the CPU's stand-in counter rises by 3 J
    while the cell runs, all inside its steady phase, which is all the joules its steady samples
    are given. The meter's clock is the test's: the readings come at the cell's start (after the
    idle window) and at its end, never from a sampling thread racing the cell."""
    root = powercap_tree(tmp_path / "powercap", package_uj=0, wrap_uj=10 ** 12)
    monkeypatch.setattr(telemetry, "POWERCAP_ROOT", root)
    monkeypatch.setattr(telemetry, "CPU_INTERVAL_S", 3600)  # the thread never reads by itself
    clock = Clock(999.9)
    make_meter = telemetry.Telemetry.meter
    monkeypatch.setattr(telemetry.Telemetry, "meter",
                        lambda self, *args, **kwargs: make_meter(self, *args, clock=clock, sleep=clock.sleep, **kwargs))
    run_the_cell = LocalBackend.run_cell

    def cell_taking_a_thousand_seconds(self, job):
        assert clock.now == pytest.approx(1000.0)  # the idle window (0.1 s) has passed on the meter's clock
        result = run_the_cell(self, job)
        clock.now = 2000.0
        return result

    monkeypatch.setattr(LocalBackend, "run_cell", cell_taking_a_thousand_seconds)
    body = f"""
        from workloads.common.result import Result
        result = Result(cell=request.cell, settings={{"batch_size": 4}}, phases={{"train": 1.0}})
        result.metrics.steady_samples_per_s, result.provenance.framework_version = 1.0, "0.0-stand-in"
        result.samples.epoch_steps = [6]
        open({str(root / "intel-rapl:0" / "energy_uj")!r}, "w").write("3000000\\n")
        result.phase_spans = {{"steady": [[1000.0, 2000.0]]}}
        result.write(request.out)
    """
    backend = LocalBackend(REGISTRY, python=fake_interpreter(body))
    cell = Cell("pytorch", "cnn", profile="smoke", data="synthetic")
    summary = run_cells([cell], backend, REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                               data_dir=tmp_path / "data", idle_window_s=0.1))
    [result] = summary.results
    assert result.status == "ok", result.reason
    stored = Result.read(tmp_path / "run" / "cells" / f"{cell.key}.json").energy
    assert stored == result.energy
    assert stored.gpu.method == "none" and stored.gpu.reason == "a CPU cell: no GPU was given to it"
    assert stored.cpu.method == "counter" and stored.cpu.gross_j == pytest.approx(3.0)
    assert stored.cpu.duration_s == pytest.approx(1000.0)
    assert stored.cpu.idle_w == pytest.approx(0.0) and stored.cpu.phase_j["steady"] == pytest.approx(3.0)
    assert stored.basis_samples == 5 * 4 and stored.joules_per_sample == pytest.approx(3.0 / 20)


# --- the report's energy columns and chart ----------------------------------------------------------

def energy_result(framework: str, repeat: int, *, rate: float, joules: float | None,
                  reason: str = "NVML did not start (Driver Not Loaded): no NVIDIA driver answers on this host") -> Result:
    from workloads.common.result import DeviceEnergy, Energy, Metrics

    from workloads.common.result import Provenance

    # a row the ranking's gate lets through (accuracy on target, the reference's parameter count), on one GPU
    result = Result(cell=Cell(framework, "cnn", variant="cu130", profile="full", data="real", repeat=repeat),
                    metrics=Metrics(train_time_s=10.0, steady_samples_per_s=rate, test_accuracy=0.77,
                                    parameter_count=3_441_592),
                    provenance=Provenance(device="cuda", gpu_name="NVIDIA H200"))
    if joules is None:
        result.energy = Energy(gpu=DeviceEnergy(method="none", reason=reason),
                               cpu=DeviceEnergy(method="none", reason="no RAPL package zone"),
                               reason="no device's energy was measured")
    else:
        result.energy = Energy(gpu=DeviceEnergy(method="counter", devices=["0: <b>GPU</b>"], gross_j=joules * 100,
                                                mean_w=250.0 + repeat, throttle_reasons=["SwPowerCap"]),
                               cpu=DeviceEnergy(method="none", reason="no RAPL package zone"),
                               basis_phase="steady", basis_samples=100, basis_devices=["gpu"],
                               joules_per_sample=joules, net_joules_per_sample=joules / 2,
                               samples_per_joule=1 / joules, kwh=joules * 100 / 3.6e6)
    return measured(result)


def test_the_report_shows_energy_columns_and_one_chart(tmp_path):
    from orchestrator.report import render
    from orchestrator.results import cell_path

    made = [energy_result("pytorch", repeat, rate=1000.0 + 100 * repeat, joules=0.2 + 0.1 * repeat)
            for repeat in range(3)]
    made.append(energy_result("tensorflow", 0, rate=500.0, joules=0.8))
    made.append(measured(Result(cell=Cell("jax", "cnn", variant="cu130", profile="full", data="real"),
                                metrics=made[0].metrics)))  # an older result: no energy record
    for result in made:
        result.write(cell_path(tmp_path, result.cell))
    markdown_path, html_path = render(tmp_path)
    markdown, html = markdown_path.read_text(), html_path.read_text()
    energy = markdown[markdown.index("## Energy"):]
    header = next(line for line in energy.splitlines() if line.startswith("| Framework"))
    assert "J/sample" in header and "Samples/J" in header and "Mean GPU W" in header and "Method" in header
    pytorch = next(line for line in energy.splitlines() if line.startswith("| pytorch"))
    # the repeats' medians: 0.3 J/sample, 1100 samples/s, 251 W
    assert "| 0.3 |" in pytorch and "1,100" in pytorch and "251" in pytorch and "GPU counter, CPU none" in pytorch
    rows = [line for line in energy.splitlines() if line.startswith("| ") and not line.startswith("| Framework")]
    assert [line.split("|")[1].strip() for line in rows][:2] == ["pytorch", "tensorflow"]  # frugal first
    assert not any(line.startswith("| jax") for line in rows)
    assert html.count('id="chart-energy') >= 1 and "joules per sample or image" in html
    assert "<b>GPU</b>" not in html and "&lt;b&gt;GPU&lt;/b&gt;" in html  # a device name is text
    assert "clock events seen: SwPowerCap" in markdown


def test_a_run_that_measured_nothing_says_why_in_one_line(tmp_path):
    from orchestrator.report import render
    from orchestrator.results import cell_path

    for repeat in range(2):
        result = energy_result("pytorch", repeat, rate=1000.0, joules=None)
        result.write(cell_path(tmp_path, result.cell))
    markdown_path, html_path = render(tmp_path)
    markdown = markdown_path.read_text()
    line = next(line for line in markdown.splitlines() if line.startswith("No energy was measured"))
    assert "NVML did not start (Driver Not Loaded)" in line and "no RAPL package zone" in line
    assert 'id="chart-energy' not in html_path.read_text()
