"""The timed runner's logic on a CPU: adaptive stopping, L2 scrub placement, telemetry plumbing.

The clock, the timed call, the scrubber and NVML are stand-ins here; what is tested is the order
of things and what the record says. The GPU side (real scrubs, real NVML values) needs a GPU run.
"""
from __future__ import annotations

import contextlib
import sys
import time
import types

import numpy as np
import pytest

from workloads.harness import runner, sampling, telemetry
from workloads.backend import EventPair
from workloads.contract import WorkloadError


class FakeClock:
    def __init__(self, step_s: float) -> None:
        self.t, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.t += self.step_s
        return self.t


def test_quiet_samples_stop_at_the_minimum():
    r = sampling.sample_adaptively(lambda i: 1.0, sampling.SamplingRule(), FakeClock(0.001))
    assert (len(r.samples), r.stopped_because, r.rel_halfwidth) == (10, "converged", 0.0)


def test_noisy_samples_run_until_the_budget():
    rng = np.random.default_rng(0)
    clock = FakeClock(0.5)  # every clock read advances half a second
    rule = sampling.SamplingRule(budget_s=20.0)
    r = sampling.sample_adaptively(lambda i: 1.0 + 0.5 * rng.random(), rule, clock)
    assert r.stopped_because == "budget" and r.elapsed_s >= 20.0
    assert 10 < len(r.samples) <= 50 and r.rel_halfwidth > 0.01  # one clock read per sample after the 10th


def test_the_minimum_is_taken_even_when_the_budget_is_spent():
    r = sampling.sample_adaptively(lambda i: float(i % 2 + 1), sampling.SamplingRule(budget_s=1e-9), FakeClock(1.0))
    assert (len(r.samples), r.stopped_because) == (10, "budget")


def test_noise_that_shrinks_with_samples_converges_before_the_cap():
    rng = np.random.default_rng(1)
    r = sampling.sample_adaptively(lambda i: 1.0 + 0.02 * rng.standard_normal(), sampling.SamplingRule(),
                                   FakeClock(1e-4))
    # 2% spread: the median's half-width reaches 1% after a few dozen samples
    assert r.stopped_because == "converged" and 10 < len(r.samples) < 200
    assert r.rel_halfwidth <= 0.01


def test_fixed_rule_takes_exactly_n():
    r = sampling.sample_adaptively(lambda i: float(i), sampling.SamplingRule.fixed(7), FakeClock(1.0))
    assert (len(r.samples), r.stopped_because) == (7, "max_samples")


def test_median_interval_covers_the_median_at_least_95_percent():
    rng = np.random.default_rng(2)
    for n in (10, 25, 60):
        hits = sum(lo <= 0.0 <= hi for lo, hi in
                   (sampling.median_interval(rng.standard_normal(n)) for _ in range(2000)))
        assert hits / 2000 >= 0.94


def test_rule_refuses_nonsense():
    with pytest.raises(ValueError):
        sampling.SamplingRule(min_samples=20, max_samples=10)


# --- the runner's timed loop ------------------------------------------------------------------

class Log(list):
    pass


class FakeEvents(EventPair):
    def __init__(self, log: Log) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("event start")

    def stop(self) -> None:
        self.log.append("event stop")

    def elapsed_ms(self) -> float:
        return 2.0


class FakeVariant:
    def __init__(self, log: Log) -> None:
        self.log = log

    def event_pair(self):
        return FakeEvents(self.log)

    def step(self):
        self.log.append("step")

    def synchronize(self):
        self.log.append("sync")


class FakeScrubber:
    l2_bytes, buffer_bytes = 60 << 20, 120 << 20

    def __init__(self, log: Log) -> None:
        self.log = log

    def scrub(self) -> float:
        self.log.append("scrub")
        return 0.003


def _ph(name, payload=None):
    return contextlib.nullcontext()


def _no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    return telemetry.Telemetry.open()


def test_cold_l2_scrubs_before_every_sample_outside_the_timed_window(monkeypatch):
    log = Log()
    out = runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "cold-l2",
                             scrubber=FakeScrubber(log), gpu=_no_nvml(monkeypatch), clock=FakeClock(1e-3))
    assert log == ["scrub", "event start", "step", "event stop", "sync"] * 10
    assert out["l2_mode"] == "cold-l2" and out["samples"] == 10 and out["times_ms"] == [2.0] * 10
    assert out["l2_scrub"]["scrub_ms"] == pytest.approx([3.0] * 10)
    assert out["l2_scrub"]["buffer_bytes"] == 2 * out["l2_scrub"]["l2_bytes"]
    assert out["telemetry"] == {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}


def test_warm_never_scrubs_and_unknown_modes_are_refused(monkeypatch):
    log = Log()
    out = runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "warm",
                             gpu=_no_nvml(monkeypatch), clock=FakeClock(1e-3))
    assert "scrub" not in log and "l2_scrub" not in out and out["l2_mode"] == "warm"
    with pytest.raises(WorkloadError, match="unknown L2 mode"):
        runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "cold", gpu=_no_nvml(monkeypatch))


def test_runner_options_reach_the_rule():
    from workloads.registry import BY_NAME

    p = runner._parser(BY_NAME["cupy_sqdiff"])
    a = p.parse_args(["--variant", "fused", "--mode", "timed", "--l2", "cold-l2", "--budget-s", "5"])
    assert a.l2 == "cold-l2" and runner.sampling_rule(a) == sampling.SamplingRule(budget_s=5.0)
    assert runner.sampling_rule(p.parse_args(["--variant", "fused", "--repeats", "12"])).max_samples == 12
    with pytest.raises(SystemExit):
        p.parse_args(["--variant", "fused", "--l2", "cold"])


# --- NVML plumbing: a stand-in module with NVML's names, some values not supported --------------

def _fake_pynvml():
    class NVMLError(Exception):
        pass

    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.nvmlClocksEventReasonGpuIdle, m.nvmlClocksEventReasonSwPowerCap = 0x1, 0x4
    m.nvmlClocksEventReasonNone = 0
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetHandleByPciBusId = lambda bus: ("handle", bus)
    m.nvmlDeviceGetClockInfo = lambda h, which: {1: 1980, 2: 3201}[which]
    m.nvmlDeviceGetTemperature = lambda h, which: 41
    m.nvmlDeviceGetPowerUsage = lambda h: 250_000
    energy = iter(range(0, 10**9, 500))
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: next(energy)
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4

    def not_supported(*a):
        raise NVMLError("Not Supported")

    m.nvmlDeviceGetPowerManagementLimit = not_supported
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetMaxClockInfo = lambda h, which: 1980
    return m


def test_telemetry_records_every_sample_and_marks_what_the_gpu_does_not_report(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    gpu = telemetry.Telemetry.open(pci_bus_id=lambda: "00000000:19:00.0")
    assert gpu.available
    log = Log()
    # no energy burst: the samples' own windows read the energy counter
    out = runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "warm", gpu=gpu,
                             clock=FakeClock(1e-3), energy_burst_s=0)
    t = out["telemetry"]
    assert len(t["per_sample"]) == 10 and t["sample_energy_read"] is True
    s = t["per_sample"][0]["before"]
    assert (s["sm_clock_mhz"], s["mem_clock_mhz"], s["power_mw"]) == (1980, 3201, 250_000)
    assert s["clock_event_reason_names"] == ["SwPowerCap"] and s["throttled"] is True
    assert t["throttled_samples"] == 10 and t["sm_clock_mhz_range"] == [1980, 1980]
    assert t["energy_per_call_j"] == pytest.approx(0.5)  # the counter moved 500 mJ across each sample
    assert out["_gpu_state_start"]["power_limit_mw"] is None  # not supported: recorded as unknown
    assert out["_gpu_state_start"]["persistence_mode"] == 1


def test_telemetry_without_a_gpu_says_why(monkeypatch):
    m = _fake_pynvml()

    def no_driver():
        raise m.NVMLError("Driver Not Loaded")

    m.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", m)
    gpu = telemetry.Telemetry.open()
    assert not gpu.available and "Driver Not Loaded" in gpu.reason
    assert gpu.snapshot() is None


def _real_timing(name: str) -> dict:
    """A timed run's record as the runner wrote it on an H200 (tests/data/telemetry_h200)."""
    import gzip
    import json
    import os

    with gzip.open(os.path.join(os.path.dirname(__file__), "data", "telemetry_h200", name), "rt") as f:
        return json.load(f)


def test_energy_per_call_is_left_out_where_the_counter_did_not_move_during_the_samples():
    """CuPy fused at 16384: 30 calls of 1.5 ms, and NVML's energy counter stood still across every
    one of them (it advances in steps); summing those differences would report 0 J a call."""
    rec = _real_timing("cupy_sqdiff_fused_n16384_timing.json.gz")
    per_sample = rec["telemetry"]["per_sample"]
    start = per_sample[0]["before"]["energy_mj"]
    t = telemetry.summarize(per_sample, (start, start + 41_177), rec["samples"])
    assert t["energy_per_call_j"] is None
    assert t["energy_note"].startswith("the energy counter moved during 0 of 30 samples")
    assert t["loop_energy_per_call_j"] == pytest.approx(41.177 / 30)
    assert t["sm_clock_mhz_range"] == [1980, 1980] and t["throttled_samples"] == 0


def test_energy_per_call_from_samples_the_counter_moved_across():
    """Numba pinned at 256 Mi: 10 calls of ~80 ms, the counter moved across each: joules per call."""
    rec = _real_timing("numba_ufunc_pinned_n268435456_timing.json.gz")
    per_sample = rec["telemetry"]["per_sample"]
    t = telemetry.summarize(per_sample, (None, None), rec["samples"])
    deltas = [s["after"]["energy_mj"] - s["before"]["energy_mj"] for s in per_sample]
    assert t["energy_note"] is None and all(d > 0 for d in deltas)
    assert t["energy_per_call_j"] == pytest.approx(sum(deltas) / 1e3 / len(deltas))
    assert 5 < t["energy_per_call_j"] < 50  # an H200 at 134-156 W for ~80 ms: about 10 J


def _counter_updating_every(period_s: float, watts: float, read_s: float = 0.001):
    """An energy counter like an H100's: it holds the energy up to its last update, and updates
    every ``period_s`` of the real clock (a read takes ``read_s``, as NVML's takes ~3 ms)."""
    def read(handle):
        time.sleep(read_s)
        return int(time.perf_counter() // period_s * period_s * watts * 1e3)
    return read


class SleepingVariant(FakeVariant):
    """A call that keeps the (fake) GPU busy for ``call_s`` of real time."""

    def __init__(self, log: Log, call_s: float) -> None:
        super().__init__(log)
        self.call_s = call_s

    def synchronize(self):
        time.sleep(self.call_s)
        super().synchronize()


def test_a_short_calls_energy_comes_from_calls_back_to_back_not_from_the_timed_loop(monkeypatch):
    """The counter cannot resolve one short call; the timed loop's energy includes its gaps (NVML
    reads, the sampling rule's statistics), so it is never shown as the call's. Calls run back to
    back after the samples are measured instead, each synchronized like a sample, and their power
    is read between counter updates seen while they run."""
    fake = _fake_pynvml()
    fake.nvmlDeviceGetTotalEnergyConsumption = _counter_updating_every(0.02, watts=250.0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = telemetry.Telemetry.open(pci_bus_id=lambda: "00000000:19:00.0")
    log = Log()
    out = runner.timed_calls(SleepingVariant(log, 0.002), _ph, sampling.SamplingRule.fixed(10), "warm", gpu=gpu,
                             energy_burst_s=0.3)
    burst = out["telemetry"]["burst"]
    # after the 10 samples: steps each followed by a synchronize, until 0.3 s passed and the counter
    # updated three times among them
    tail = log[log.index("step", len(log) - 2 * burst["calls"] - 1):]
    assert tail == ["step", "sync"] * burst["calls"] and burst["calls"] >= 2
    assert burst["wall_s"] >= 0.3 and burst["counter_updates"] >= telemetry.MIN_BURST_UPDATES
    # the power between updates is the counter's 250 W (a read's 1 ms, and the thread's scheduling
    # on a busy test machine, off at each end of a ~0.25 s window)
    assert burst["mean_power_w"] == pytest.approx(250.0, rel=0.15)
    assert burst["energy_per_call_j"] == pytest.approx(burst["mean_power_w"] * burst["wall_s"] / burst["calls"])
    # the burst's energy is the call's (a sample's window holds the host's share too)
    assert telemetry.energy_per_call(out["telemetry"]) == (burst["energy_per_call_j"],
                                                           f"{burst['calls']} calls back to back")
    # and with a burst to follow, the samples' snapshots leave the slow energy counter unread
    assert out["telemetry"]["sample_energy_read"] is False and out["telemetry"]["energy_per_call_j"] is None
    assert all(s[side]["energy_mj"] is None and s[side]["sm_clock_mhz"] == 1980
               for s in out["telemetry"]["per_sample"] for side in ("before", "after"))
    # without a burst the samples' windows are what is left
    samples_only = runner.timed_calls(SleepingVariant(Log(), 0.03), _ph, sampling.SamplingRule.fixed(10), "warm",
                                      gpu=gpu, energy_burst_s=0)["telemetry"]
    assert telemetry.energy_per_call(samples_only) == (samples_only["energy_per_call_j"], telemetry.SAMPLE_WINDOWS)
    # a loop figure alone is not an energy per call
    alone = {"available": True, "energy_per_call_j": None, "loop_energy_per_call_j": 8.8, "burst": None,
             "energy_note": "the energy counter moved during 1 of 30 samples: too coarse for calls this short"}
    assert telemetry.energy_per_call(alone) == (None, alone["energy_note"])


def test_burst_energy_takes_the_power_between_the_second_and_the_last_update_inside_the_calls():
    """Reads at arbitrary times are up to one update period off at each end (±10% of a 1 s burst
    with an H100's 100 ms updates); updates seen inside the calls are not. The first update may
    still hold energy from before the calls, so it only opens the window."""
    # calls from 1.00 to 2.00 s; updates every 100 ms at 300 W, but the one at 1.05 s also holds
    # the idle 50 ms before the calls (at 60 W)
    updates = [(0.95, 1_000)]
    energy_mj = 1_000 + 60 * 50 + 300 * 0  # what the counter says at 1.05: idle until 1.00, then calls
    updates.append((1.05, energy_mj))
    for i in range(1, 10):
        energy_mj += 300 * 100
        updates.append((1.05 + i * 0.1, energy_mj))
    b = telemetry.burst_energy(updates, 1.0, 2.0, calls=400)
    assert b["counter_updates"] == 10 and b["window_s"] == pytest.approx(0.8)
    assert b["mean_power_w"] == pytest.approx(300.0) and b["energy_per_call_j"] == pytest.approx(300.0 / 400)
    # two reads around the burst would have said (counter at 2.00 - counter at 1.00) / 400 calls:
    # 273 J, the last 50 ms of calls missing and 50 ms of idle in: 9% low here
    two_reads = (updates[-1][1] - updates[0][1]) / 1e3 / 400
    assert two_reads / b["energy_per_call_j"] == pytest.approx(0.91)
    # too few updates inside the calls: no energy, and why
    short = telemetry.burst_energy(updates[:3], 1.0, 1.2, calls=80)
    assert short["energy_per_call_j"] is None and "updated 2 times" in short["energy_note"]
    assert telemetry.energy_per_call({"available": True, "burst": short}) == (None, short["energy_note"])


def test_no_burst_without_nvml_or_in_cold_l2_mode(monkeypatch):
    log = Log()
    out = runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "warm",
                             gpu=_no_nvml(monkeypatch), clock=FakeClock(1e-3))
    assert log == ["event start", "step", "event stop", "sync"] * 10 and "burst" not in out["telemetry"]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    gpu = telemetry.Telemetry.open(pci_bus_id=lambda: "00000000:19:00.0")
    reads = []
    read_energy = gpu._nvml.nvmlDeviceGetTotalEnergyConsumption
    monkeypatch.setattr(gpu._nvml, "nvmlDeviceGetTotalEnergyConsumption", lambda h: reads.append(h) or read_energy(h))
    out = runner.timed_calls(FakeVariant(log), _ph, sampling.SamplingRule.fixed(10), "cold-l2", gpu=gpu,
                             scrubber=FakeScrubber(Log()), clock=FakeClock(1e-3))
    t = out["telemetry"]
    assert t["burst"] is None
    # nor do its samples read the energy counter (milliseconds a read, for calls of microseconds at
    # the L2-sized working sets cold-L2 runs at): the clocks are still read around every sample
    assert t["sample_energy_read"] is False and t["energy_per_call_j"] is None
    assert all(s[side]["energy_mj"] is None and s[side]["sm_clock_mhz"] == 1980
               for s in t["per_sample"] for side in ("before", "after"))
    # around the loop only (its start and end), not twice a sample
    assert len(t["per_sample"]) == 10 and 0 < len(reads) < 10
    assert telemetry.energy_per_call(t) == (None, t["energy_note"])
    assert t["energy_note"].startswith("the samples did not read the energy counter")
    # a GPU without the counter says so, not that the samples left it unread
    none = _fake_pynvml()

    def not_supported(h):
        raise none.NVMLError("Not Supported")

    none.nvmlDeviceGetTotalEnergyConsumption = not_supported
    monkeypatch.setitem(sys.modules, "pynvml", none)
    gpu = telemetry.Telemetry.open(pci_bus_id=lambda: "00000000:19:00.0")
    t = runner.timed_calls(FakeVariant(Log()), _ph, sampling.SamplingRule.fixed(10), "cold-l2", gpu=gpu,
                           scrubber=FakeScrubber(Log()), clock=FakeClock(1e-3))["telemetry"]
    assert t["energy_note"] is None and telemetry.energy_per_call(t) == (None, "no energy counter")


def _real_h100_timing(name: str) -> dict:
    """A timed run's record as the runner wrote it on an H100, with its energy burst (tests/data/telemetry_h100)."""
    import gzip
    import json
    import os

    with gzip.open(os.path.join(os.path.dirname(__file__), "data", "telemetry_h100", name), "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("name, calls_at_least, watts", [
    ("cupy_fused_16384.json.gz", 400, (300, 700)),      # 2.3 ms DRAM-bound calls
    ("numba_float32.json.gz", 2000, (300, 700)),        # 0.57 ms
    ("pycuda_vectorized.json.gz", 4000, (300, 700)),    # 0.27 ms
    ("jax_float32_8192.json.gz", 35, (300, 700)),       # 25 ms FFMA-bound GEMMs
])
def test_real_records_take_joules_per_call_from_their_burst(name, calls_at_least, watts):
    """Four recipes on an H100: every sample's clocks and throttle flags are recorded, and the joules
    per call shown are the burst's (energy over a second of calls back to back, divided by the calls),
    which agree with the burst's mean power times the call's time within the calls' spread."""
    rec = _real_h100_timing(name)
    t = rec["telemetry"]
    assert len(t["per_sample"]) == rec["samples"] >= 10
    for s in t["per_sample"]:
        for side in ("before", "after"):
            assert {"sm_clock_mhz", "mem_clock_mhz", "power_mw", "temperature_c", "throttled"} <= set(s[side])
    assert t["throttled_samples"] == 0 and t["sm_clock_mhz_range"] == [1980, 1980]
    joules, source = telemetry.energy_per_call(t)
    burst = t["burst"]
    assert burst["calls"] >= calls_at_least and source == f"{burst['calls']} calls back to back"
    assert joules == pytest.approx(burst["energy_j"] / burst["calls"])
    assert watts[0] < burst["mean_power_w"] < watts[1]
    # a call back to back takes about what a timed sample took: power x median time ~ joules per call
    assert joules == pytest.approx(burst["mean_power_w"] * rec["timing"]["median_ms"] / 1e3, rel=0.25)


@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_the_binomial_quantile_is_scipy_stats_binom_ppf(confidence):
    """sampling.py takes the quantile from scipy.special (a fifth of scipy.stats' import, in every timed
    process): the same k as binom.ppf for every sample count a run can hold."""
    from scipy import stats

    q = (1 - confidence) / 2
    ns = np.arange(1, 2 * sampling.SamplingRule().max_samples + 1)
    assert [sampling._binomial_half_quantile(q, int(n)) for n in ns] == stats.binom.ppf(q, ns, 0.5).astype(int).tolist()
