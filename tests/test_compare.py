"""`compare BASE NEW`: cells matched across two runs, the verdict per cell (factor and significance
from the raw repeats), the exit status CI reads, compare.md and compare.html, and bad input.

Every test writes two run folders of fabricated results (workloads.common.result.Result) into
tmp_path and runs the real command line on them, as `python -m orchestrator compare` does."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from orchestrator import compare
from orchestrator.__main__ import main
from workloads.common import declaration
from workloads.common.result import Cell, Metrics, Provenance, Result
from conftest import error_line
from support.records import cell_file, measured

ROOT = Path(__file__).resolve().parent.parent
SCRIPT_REASON = "<script>alert(1)</script> | exploded"
HOSTILE_OPTION = "<img src=x onerror=alert(1)>"
CNN = declaration.get("cnn")


def result(framework, rate, *, repeat=0, workload="cnn", accuracy=0.77, status="ok", reason=None, profile="full",
           options=None, gpu="NVIDIA H200", version="1.0") -> Result:
    """One repeat: `rate` is the workload's headline figure (steady samples/s, or ResNet-50's images/s)."""
    metrics = Metrics()
    if status == "ok" and workload == "resnet50":
        metrics = Metrics(images_per_s=rate, seconds_per_1000_images=1000 / rate)
    elif status == "ok":
        metrics = Metrics(steady_samples_per_s=rate, samples_per_s=rate * 0.9, train_time_s=50_000 / rate,
                          test_accuracy=accuracy)
    return measured(Result(cell=Cell(framework=framework, workload=workload, variant="cuda12", profile=profile,
                            repeat=repeat, options=options or {}),
                  status=status, reason=reason, metrics=metrics,
                  provenance=Provenance(framework_version=version, device="cuda", gpu_name=gpu, backend="docker")))


def write_run(folder: Path, results: list[Result]) -> Path:
    for item in results:
        item.write(cell_file(folder, item))
    return folder


def repeats(framework, rates, **kwargs) -> list[Result]:
    return [result(framework, rate, repeat=number, **kwargs) for number, rate in enumerate(rates)]


# Five repeats with a spread of about 1%: a 30% slowdown is far outside it.
STEADY = [1000.0, 1010.0, 990.0, 1005.0, 995.0]
SLOWER = [rate * 0.7 for rate in STEADY]
NOISY = [rate * 1.02 for rate in reversed(STEADY)]  # 2%: inside the default factor


@pytest.fixture
def runs(tmp_path):
    def make(base: list[Result], new: list[Result]) -> tuple[Path, Path]:
        return write_run(tmp_path / "base", base), write_run(tmp_path / "new", new)
    return make


def run_compare(base, new, *extra) -> int:
    return main(["compare", str(base), str(new), *extra])


def page(folder: Path) -> str:
    return (folder / compare.COMPARE_MD).read_text()


def matched_row(comparison: compare.Comparison, framework: str) -> compare.Row:
    (row,) = [row for row in comparison.rows if row.identity["framework"] == framework]
    return row


# --- verdicts ------------------------------------------------------------------------------------

def test_a_clear_slowdown_with_five_repeats_is_significant_by_mann_whitney_and_exits_1(runs, capsys):
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", SLOWER))
    assert run_compare(base, new) == 1
    out = capsys.readouterr()
    assert "Mann-Whitney U" in out.out and "worse" in out.out
    assert "1 of 1 matched cells worse" in out.err
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.method == compare.MANN_WHITNEY and row.p_value < compare.ALPHA
    assert row.worse_by == pytest.approx(1 / 0.7) and row.ratio == pytest.approx(0.7)
    assert row.verdict == compare.WORSE
    markdown = page(new)
    assert "Mann-Whitney U" in markdown and "| worse |" in markdown
    assert (new / compare.COMPARE_HTML).is_file()


def test_noise_within_the_factor_is_no_change_and_exits_0(runs, capsys):
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", NOISY))
    assert run_compare(base, new) == 0
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.verdict == compare.SAME and row.method == compare.MANN_WHITNEY
    assert "0 of 1 matched cells worse" in capsys.readouterr().err


def test_the_factor_decides_what_counts(runs):
    """The same 30% slowdown: worse under the default factor, not under --factor 1.5."""
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", SLOWER))
    assert run_compare(base, new, "--factor", "1.5") == 0
    assert matched_row(compare.compare(base, new, 1.5), "pytorch").verdict == compare.SAME


def test_a_big_change_the_repeats_cannot_tell_from_noise_is_not_significant(runs):
    """Medians 25% apart, but the repeats overlap widely: beyond the factor, yet not significant."""
    base_rates, new_rates = [100.0, 200.0, 150.0, 90.0, 210.0], [95.0, 205.0, 120.0, 85.0, 190.0]
    base, new = runs(repeats("pytorch", base_rates), repeats("pytorch", new_rates))
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.worse_by > compare.DEFAULT_FACTOR and row.p_value >= compare.ALPHA
    assert row.verdict == compare.NOT_SIGNIFICANT
    assert run_compare(base, new) == 0


def test_one_repeat_is_judged_by_the_factor_alone(runs, capsys):
    base, new = runs([result("pytorch", STEADY[0])], [result("pytorch", SLOWER[0])])
    assert run_compare(base, new) == 1
    assert "factor only" in capsys.readouterr().out
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.method.startswith(compare.FACTOR_ONLY) and math.isnan(row.p_value) and row.verdict == compare.WORSE
    assert "factor only (fewer than" in page(new)


def test_three_repeats_use_welchs_t_test(runs):
    base, new = runs(repeats("pytorch", STEADY[:3]), repeats("pytorch", SLOWER[:3]))
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.method == compare.WELCH and row.p_value < compare.ALPHA and row.verdict == compare.WORSE


def test_repeats_without_any_spread_fall_back_to_the_factor(runs):
    base, new = runs(repeats("pytorch", [STEADY[0]] * 5), repeats("pytorch", [SLOWER[0]] * 5))
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.method == f"{compare.FACTOR_ONLY} (no spread in either run)" and row.verdict == compare.WORSE


def test_faster_is_better_never_worse(runs):
    base, new = runs(repeats("pytorch", SLOWER), repeats("pytorch", STEADY))
    assert run_compare(base, new) == 0
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.verdict == compare.BETTER and row.p_value < compare.ALPHA and row.worse_by < 1


def test_the_test_looks_the_way_the_headline_is_worse():
    """A figure where lower is better is worse when it grows, one where higher is better when it falls."""
    low, high = [1.0, 1.01, 0.99, 1.02, 0.98], [1.5, 1.51, 1.49, 1.52, 1.48]
    assert compare.significance(low, high, higher_is_better=False)[1] < compare.ALPHA
    assert compare.significance(low, high, higher_is_better=True)[1] > 1 - compare.ALPHA
    assert compare.significance(high, low, higher_is_better=True)[1] < compare.ALPHA


def test_accuracy_worse_than_the_declared_tolerance_counts(runs):
    tolerance = CNN.accuracy_tolerance
    assert tolerance > 0
    base, new = runs(repeats("pytorch", STEADY, accuracy=0.77),
                     repeats("pytorch", NOISY, accuracy=0.77 - 2 * tolerance))
    assert run_compare(base, new) == 1
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.verdict == compare.SAME and row.accuracy_verdict == compare.WORSE
    assert row.accuracy_change == pytest.approx(-2 * tolerance)
    assert "accuracy worse" in page(new)


@pytest.mark.parametrize("loss", [CNN.accuracy_tolerance / 2, CNN.accuracy_tolerance])
def test_accuracy_within_the_tolerance_does_not_count(runs, loss):
    """Down to the tolerance exactly (0.77 - 0.03 is not 0.74 in floating point) is within it."""
    base, new = runs(repeats("pytorch", STEADY, accuracy=0.77), repeats("pytorch", NOISY, accuracy=0.77 - loss))
    assert run_compare(base, new) == 0


def test_a_workload_without_accuracy_compares_its_headline_only(runs):
    base, new = runs(repeats("pytorch", STEADY, workload="resnet50"), repeats("pytorch", SLOWER, workload="resnet50"))
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.metric.name == declaration.get("resnet50").headline
    assert row.accuracy_tolerance is None and row.accuracy_verdict == "" and row.verdict == compare.WORSE


# --- cells that are not numbers, cells on one side ---------------------------------------------------

def test_failed_and_unsupported_cells_are_listed_with_their_status_never_compared(runs, capsys):
    base, new = runs(
        repeats("pytorch", STEADY) + [result("jax", 0, status="failed", reason="CUDA OOM")]
        + [result("mxnet", STEADY[0])],
        repeats("pytorch", NOISY) + [result("jax", STEADY[0])]
        + [result("mxnet", 0, status="unsupported", reason="no GPU build")])
    assert run_compare(base, new) == 0
    comparison = compare.compare(base, new)
    jax, mxnet = matched_row(comparison, "jax"), matched_row(comparison, "mxnet")
    assert jax.verdict == mxnet.verdict == compare.NOT_COMPARED
    assert math.isnan(jax.ratio) and jax.method == "" and not jax.counts_as_worse
    markdown = page(new)
    # a result that names no mode ran its framework's default: the cell's name says which
    jax_line = next(line for line in markdown.splitlines() if "· jax \\[compiled\\] ·" in line)
    assert "| failed |" in jax_line and "CUDA OOM" in jax_line
    mxnet_line = next(line for line in markdown.splitlines() if "· mxnet \\[graph\\] ·" in line)
    assert "| unsupported |" in mxnet_line


def test_a_cell_that_was_ok_and_now_fails_is_worse(runs):
    base, new = runs(repeats("pytorch", STEADY), [result("pytorch", 0, status="timeout", reason="ran past 3600 s")])
    assert run_compare(base, new) == 1
    row = matched_row(compare.compare(base, new), "pytorch")
    assert row.verdict == compare.BROKEN and "timeout" in row.new.status


def test_cells_on_one_side_only_are_listed_not_an_error(runs, capsys):
    base, new = runs(repeats("pytorch", STEADY) + [result("jax", STEADY[0])],
                     repeats("pytorch", NOISY) + [result("tensorflow", STEADY[0], options={"xla": "on"})])
    assert run_compare(base, new) == 0
    err = capsys.readouterr().err
    assert "only in BASE (1): cnn · jax" in err and "only in NEW (1): cnn · tensorflow [graph, xla=on]" in err
    markdown = page(new)
    assert "## Only in BASE" in markdown and "## Only in NEW" in markdown
    assert "tensorflow \\[graph, xla=on\\]" in markdown  # escaped Markdown, the brackets kept


def test_options_and_repeats_decide_what_is_matched(runs):
    """Repeat numbers differ freely; an option makes another cell."""
    base, new = runs(repeats("pytorch", STEADY), [result("pytorch", rate, repeat=number + 10)
                                                  for number, rate in enumerate(NOISY)]
                     + [result("pytorch", STEADY[0], options={"compile": "on"})])
    comparison = compare.compare(base, new)
    assert [row.identity["options"] for row in comparison.rows] == [""]
    assert len(comparison.rows[0].new.values) == len(NOISY)
    assert [cell["identity"]["options"] for cell in comparison.only_new] == ["compile=on"]


def test_a_different_version_is_noted(runs):
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", NOISY, version="2.0"))
    assert "pytorch 1.0 in BASE, 2.0 in NEW" in matched_row(compare.compare(base, new), "pytorch").notes


# --- devices (FAIRNESS.md: compare-same-device) ---------------------------------------------------------

def test_a_cell_run_on_another_gpu_model_is_not_compared_and_says_why(runs, capsys):
    """Both runs share the H200; jax ran on the H200 in BASE and on an A100 in NEW (the same cell
    key: the key does not name the GPU). It is two cells, each listed with why, never compared."""
    base, new = runs(repeats("pytorch", STEADY) + repeats("jax", STEADY),
                     repeats("pytorch", NOISY) + repeats("jax", SLOWER, gpu="NVIDIA A100"))
    assert run_compare(base, new) == 0  # the jax slowdown is another GPU's figure: not a regression
    comparison = compare.compare(base, new)
    assert [row.identity["framework"] for row in comparison.rows] == ["pytorch"]
    assert comparison.rows[0].identity["machine"] == "GPU NVIDIA H200"
    [only_base], [only_new] = comparison.only_base, comparison.only_new
    assert only_base["why"] == "NEW ran it on GPU NVIDIA A100, not on GPU NVIDIA H200"
    assert only_new["why"] == "BASE ran it on GPU NVIDIA H200, not on GPU NVIDIA A100"
    err = capsys.readouterr().err
    assert "only in BASE (1): cnn · jax [compiled] · cuda12 · fp32 · full · real · GPU NVIDIA H200 (ok; NEW ran it on GPU " \
           "NVIDIA A100" in " ".join(err.split())
    markdown = page(new)
    assert "not compared: NEW ran it on GPU NVIDIA A100, not on GPU NVIDIA H200" in markdown
    assert "not compared: BASE ran it on GPU NVIDIA H200" in (new / compare.COMPARE_HTML).read_text()


def test_a_run_from_another_device_is_refused_in_one_line(runs, capsys):
    base, new = runs(repeats("pytorch", STEADY) + repeats("jax", STEADY),
                     repeats("pytorch", SLOWER, gpu="NVIDIA A100") + repeats("jax", STEADY, gpu="NVIDIA A100"))
    assert run_compare(base, new) == 2
    line = error_line(capsys)
    assert line.startswith("error: BASE ran on GPU NVIDIA H200 and NEW on GPU NVIDIA A100: figures from another "
                           "device are not on the same scale, so nothing was compared")
    assert not (new / compare.COMPARE_MD).exists()


# --- the pages -------------------------------------------------------------------------------------

class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.table_ids, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.table_ids.append(dict(attrs).get("id"))

    def handle_data(self, data):
        self.text.append(data)


def test_html_is_self_contained_and_escapes_what_results_say(runs, tmp_path):
    hostile = {"xla": HOSTILE_OPTION}
    base, new = runs(repeats("pytorch<b>", STEADY, options=hostile) + [result("jax", STEADY[0])],
                     repeats("pytorch<b>", SLOWER, options=hostile)
                     + [result("jax", 0, status="failed", reason=SCRIPT_REASON)])
    out = tmp_path / "pages"
    assert run_compare(base, new, "--out", str(out)) == 1
    assert not (new / compare.COMPARE_HTML).exists()  # --out: NEW's folder untouched
    html = (out / compare.COMPARE_HTML).read_text()
    for raw in ("<script", "<img", "<b>"):
        assert raw not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    collector = _Collector()
    collector.feed(html)
    assert collector.table_ids == ["compare"]
    assert "script" not in collector.tags and "link" not in collector.tags and "img" not in collector.tags
    assert "http://" not in html and "https://" not in html and "src=" not in html.replace("src=x", "")
    text = "".join(collector.text)
    assert HOSTILE_OPTION in text and SCRIPT_REASON.split(" |")[0] in text  # shown as text
    markdown = (out / compare.COMPARE_MD).read_text()
    assert "<img" not in markdown and "<script" not in markdown and "pytorch&lt;b&gt;" in markdown


# --- bad input -------------------------------------------------------------------------------------

def test_not_a_run_folder_is_one_line_exit_2(tmp_path, capsys):
    run = write_run(tmp_path / "run", repeats("pytorch", STEADY))
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty" / "cells").mkdir(parents=True)
    for base, new, expected in [(tmp_path / "missing", run, "BASE"), (run, tmp_path / "file", "NEW"),
                                (run, tmp_path / "empty", "no results in")]:
        assert run_compare(base, new) == 2
        line = error_line(capsys)
        assert expected in line


def test_no_common_cells_and_different_profiles_are_refused(runs, tmp_path, capsys):
    base, new = runs(repeats("pytorch", STEADY), repeats("jax", STEADY))
    assert run_compare(base, new) == 2
    assert "no cell in common" in error_line(capsys)
    smoke = write_run(tmp_path / "smoke", repeats("pytorch", STEADY, profile="smoke"))
    assert run_compare(base, smoke) == 2
    assert "BASE ran the full profile and NEW the smoke one" in error_line(capsys)


@pytest.mark.parametrize("factor", ["0.9", "nan", "inf", "-1", "abc"])
def test_a_factor_below_1_or_not_finite_is_refused(runs, capsys, factor):
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", SLOWER))
    assert run_compare(base, new, "--factor", factor) == 2
    assert "--factor" in error_line(capsys)
    assert not (new / compare.COMPARE_MD).exists()


def test_an_output_folder_that_cannot_be_written_is_one_line(runs, tmp_path, capsys):
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", SLOWER))
    (tmp_path / "taken").write_text("a file, not a folder")
    assert run_compare(base, new, "--out", str(tmp_path / "taken")) == 2
    assert "cannot write compare.md and compare.html" in error_line(capsys)


def test_the_real_command_line_exit_status(runs):
    """`python -m orchestrator compare` in its own process: the exit status a CI job reads."""
    base, new = runs(repeats("pytorch", STEADY), repeats("pytorch", SLOWER))
    completed = subprocess.run([sys.executable, "-m", "orchestrator", "compare", str(base), str(new)], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1, completed.stderr
    assert "Mann-Whitney U" in completed.stdout and "Traceback" not in completed.stderr
    same = subprocess.run([sys.executable, "-m", "orchestrator", "compare", str(base), str(base), "--out",
                           str(base.parent / "self")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert same.returncode == 0, same.stderr


# --- docs/REPRODUCING.md: the published run folder's flow -------------------------------------------

def test_the_reproducing_flow_of_the_docs_is_true(tmp_path, monkeypatch, capsys):
    """The folder docs/REPRODUCING.md compares against is the one its publish commands pack and its
    fetch commands unpack: the docs' own `tar` lines run here on a run folder made as the release's
    would be, then its `compare` line (the asset's download needs GitHub: it is checked to name the
    same file)."""
    import shlex

    text = (ROOT / "docs" / "REPRODUCING.md").read_text()
    lines = [line.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
             for line in block.splitlines() if line.strip()]
    [pack] = [line for line in lines if line.startswith("tar -czf ")]
    [unpack] = [line for line in lines if line.startswith("tar -xzf ")]
    [download] = [line for line in lines if line.startswith("gh release download ")]
    [upload] = [line for line in lines if line.startswith("gh release upload ")]
    [compare_line] = [line for line in lines if line.startswith("python -m orchestrator compare ")]
    asset = shlex.split(pack)[2]
    assert shlex.split(unpack)[2] == asset and shlex.split(download)[-1] == asset and shlex.split(upload)[-1] == asset
    base, new = shlex.split(compare_line)[4:6]
    [published_run] = [line for line in lines if line.startswith("python -m orchestrator run-matrix ")
                       and f"--results-dir {base}" in line]
    [your_run] = [line for line in lines if line.startswith("python -m orchestrator run-matrix ")
                  and f"--results-dir {new}" in line]
    assert published_run.replace(base, new) == your_run  # the same command: the same cells
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / base, repeats("pytorch", STEADY))  # what the release's run-matrix leaves
    subprocess.run(shlex.split(pack), check=True)
    shutil.rmtree(tmp_path / base)
    subprocess.run(shlex.split(unpack), check=True)
    write_run(tmp_path / new, repeats("pytorch", NOISY))
    assert main(shlex.split(compare_line)[3:]) == 0, capsys.readouterr().err
    assert "0 of 1 matched cells worse" in capsys.readouterr().err
