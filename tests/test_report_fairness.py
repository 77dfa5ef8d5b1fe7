"""The report's fairness rules (docs/FAIRNESS.md): the steady-state headline, like-for-like groups, the
validity gate and checks, the row names, the details a reviewer needs, the first screen.

Every test fabricates cell JSON files with workloads.common.result.Result in a tmp folder and reads
them back the way `python -m orchestrator report` does."""
from __future__ import annotations

import collections
import json
import re
from html.parser import HTMLParser

import pytest

from orchestrator.report import build_context, ranking_text, render, report_frame, summarise
from orchestrator.report.checks import SLOW_STEP_FACTOR, slow_step_count
from orchestrator.results import load_cells, load_reference, to_frame
from workloads.common import declaration
from workloads.common.result import Cell, Metrics, Provenance, Result, Samples
from support.records import cell_file, measured

H200, A100, XEON = "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Intel(R) Xeon(R) Gold 6338"
STEADY_STEPS = [0.5] + [0.01] * 19  # a first step (compilation), then even steps


def training(framework, rate, *, workload="cnn", accuracy=0.77, device="cuda", gpu_model=H200, precision="fp32",
             repeat=0, options=None, init="canonical", status="ok", reason=None, steps=None, epoch_steps=None,
             traces=None, profile="full", data="real", extras=None, variant=None, mode="", **provenance) -> Result:
    """One training result: `rate` steady samples/s, a CUDA (`gpu_model`) or CPU (Xeon) device."""
    steps = list(STEADY_STEPS if steps is None else steps)
    metrics = Metrics()
    if status == "ok":
        metrics = Metrics(train_time_s=sum(steps), samples_per_s=64 * len(steps) / sum(steps),
                          steady_samples_per_s=rate, test_accuracy=accuracy,
                          parameter_count=declaration.get(workload).settings().parameter_count)
    recorded = {"optimizer": "torch.optim.SGD(fused=True)", "layout": "NCHW", "tf32": "off", "init": init}
    recorded.update(extras or {})
    facts = dict(framework_version="1.0", device=device, gpu_name=gpu_model if device == "cuda" else None,
                 cpu_model=XEON, hostname="host-1", extras=recorded)
    facts.update(provenance)
    return measured(Result(
        cell=Cell(framework, workload, variant=variant or ("cuda12" if device == "cuda" else "cpu"), precision=precision,
                  profile=profile, data=data, repeat=repeat, init=init, options=dict(options or {}), mode=mode),
        status=status, reason=reason, metrics=metrics,
        samples=Samples(first_step_s=steps[0], epoch_times_s=[sum(steps)],
                        epoch_steps=epoch_steps or [len(steps)], batch_times_s=steps, traces=dict(traces or {})),
        provenance=Provenance(**facts)))


def write(folder, results) -> None:
    for result in results:
        result.write(cell_file(folder, result))


def summary_of(folder, workload="cnn"):
    return summarise(report_frame(load_cells(folder).results))[workload]


def only(summary, **where):
    rows = summary
    for column, value in where.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, rows[list(where)]
    return rows.iloc[0]


def sections(markdown: str) -> dict[str, str]:
    parts = re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


RANKING = "Steady-state ranking (like for like)"
GRID = "At a glance: each workload's headline figure, per framework"


@pytest.fixture
def mixed(tmp_path):
    """Two GPUs, a CPU, fp16 beside fp32, three repeats each. (A cell's key does not name its GPU:
    the A100's row is another variant, so that its files do not replace the H200's.)"""
    results = []
    for repeat, factor in enumerate([1.0, 1.1, 0.9]):
        results += [
            training("pytorch", 1000 * factor, repeat=repeat),
            training("jax", 800 * factor, repeat=repeat),
            training("jax", 2000 * factor, repeat=repeat, gpu_model=A100, variant="cuda11"),
            training("pytorch", 3000 * factor, repeat=repeat, precision="fp16"),
            training("pytorch", 100 * factor, repeat=repeat, device="cpu"),
            training("jax", 50 * factor, repeat=repeat, device="cpu"),
        ]
    write(tmp_path, results)
    return tmp_path


# --- the headline and the groups ----------------------------------------------------------------------

def test_the_ranked_figure_is_the_declared_headline_not_a_hard_coded_one(mixed):
    summary = summary_of(mixed)
    assert summary.attrs["headline"] == declaration.get("cnn").headline == "steady_samples_per_s"
    pytorch = only(summary, framework="pytorch", device_kind="GPU", precision="fp32")
    assert pytorch["median"] == pytest.approx(1000) and pytorch["min"] == pytest.approx(900)
    assert pytorch["max"] == pytest.approx(1100) and pytorch["relative_spread"] == pytest.approx(0.2)
    # the other declared metrics are columns of their own: first step, total train time, overall, accuracy
    assert pytorch["first_step_s"] == pytest.approx(0.5)
    assert pytorch["train_time_s"] == pytest.approx(sum(STEADY_STEPS))
    assert pytorch["test_accuracy"] == pytest.approx(0.77)


def test_gpus_cpu_and_precisions_are_ranked_in_separate_groups(mixed):
    summary = summary_of(mixed)
    groups = summary.groupby("group_label", sort=False)
    assert list(groups.groups) == [
        "GPU NVIDIA A100-SXM4-80GB · fp32 · full profile · real data",
        "GPU NVIDIA H200 · fp32 · full profile · real data",
        "GPU NVIDIA H200 · fp16 · full profile · real data",
        f"CPU {XEON} · fp32 · full profile · real data",
    ]
    # each group has its own fastest row, at 1.00x: the A100 and the fp16 row do not rank the H200 rows
    for _, group in groups:
        assert group["rank"].iloc[0] == 1 and group["relative_to_best"].iloc[0] == pytest.approx(1.0)
    h200 = only(summary, framework="jax", device_model=H200)
    assert h200["rank"] == 2 and h200["relative_to_best"] == pytest.approx(1000 / 800)
    cpu_jax = only(summary, framework="jax", device_kind="CPU")
    assert cpu_jax["rank"] == 2 and cpu_jax["relative_to_best"] == pytest.approx(2.0)
    assert only(summary, precision="fp16")["relative_to_best"] == pytest.approx(1.0)


def test_each_group_has_its_own_ranking_table_and_chart(mixed):
    context = build_context(report_frame(load_cells(mixed).results), load_reference())
    [cnn] = [item for item in context["ranking"] if item["workload"] == "cnn"]
    assert [group["label"] for group in cnn["groups"]][:2] == [
        "GPU NVIDIA A100-SXM4-80GB · fp32 · full profile · real data",
        "GPU NVIDIA H200 · fp32 · full profile · real data"]
    h200 = cnn["groups"][1]["table"]
    assert [row["cells"][:3] for row in h200["rows"]] == [["1", "pytorch", "cuda12"], ["2", "jax", "cuda12"]]
    html = render(mixed)[1].read_text()
    assert html.count('<figure class="chart">') == 4  # one chart per group


def test_a_gpu_named_only_by_nvidia_smi_still_finds_its_group(tmp_path):
    write(tmp_path, [training("pytorch", 1000),
                     training("mxnet", 500, gpu_model=None, gpu={"name": H200, "memory_total_mib": "143771"})])
    summary = summary_of(tmp_path)
    assert summary["group_label"].nunique() == 1 and only(summary, framework="mxnet")["rank"] == 2


def test_a_failed_repeat_without_a_device_joins_its_row(tmp_path):
    failed = training("pytorch", 0, repeat=1, status="failed", reason="CUDA error", device=None, gpu_model=None,
                      variant="cuda12")
    nameless = training("pytorch", 0, repeat=2, status="failed", reason="CUDA error", gpu_model=None)
    write(tmp_path, [training("pytorch", 1000), failed, nameless])
    row = only(summary_of(tmp_path), framework="pytorch")
    assert row["runs"] == 3 and row["ok_repeats"] == 1 and "2 of 3 repeats not ok" in row["note"]
    assert row["group_label"].startswith("GPU NVIDIA H200") and row["not_ranked"] == "repeats: 1 of 3 repeats ok"


# --- row names ---------------------------------------------------------------------------------------

def test_non_default_options_and_init_are_part_of_the_row_name(tmp_path):
    write(tmp_path, [training("tensorflow", 900), training("tensorflow", 1200, options={"xla": "on"}),
                     training("pytorch", 1000, init="framework")])
    summary = summary_of(tmp_path)
    assert summary["row_name"].tolist() == ["tensorflow [xla=on]", "pytorch [init=framework]", "tensorflow"]
    assert summary["rank"].tolist() == [1, 2, 3]
    markdown = render(tmp_path)[0].read_text()
    ranking = sections(markdown)[RANKING]
    assert "| 1 | tensorflow \\[xla=on\\] | cuda12 | 1,200 |" in ranking
    assert "| 3 | tensorflow | cuda12 | 900 |" in ranking


# --- the validity gate -------------------------------------------------------------------------------

def test_a_diverged_cell_is_failed_and_never_ranked(tmp_path):
    diverged = training("mxnet", 0, status="failed", reason="diverged: the training loss after epoch 1 is nan")
    # one diverged repeat out of three is enough: the row's accuracy and speed are not trusted
    partly = [training("chainer", 5000, repeat=0), training("chainer", 5000, repeat=1),
              training("chainer", 0, repeat=2, status="failed",
                       reason="diverged: the training loss rose from 2.3 (first step) to 9.1 (end of epoch 1)")]
    write(tmp_path, [training("pytorch", 1000), diverged, *partly])
    summary = summary_of(tmp_path)
    assert summary["rank"].dropna().tolist() == [1] and only(summary, rank=1)["framework"] == "pytorch"
    for framework in ("mxnet", "chainer"):
        row = only(summary, framework=framework)
        assert row["status"] == "failed" and row["diverged"] and row["relative_to_best"] != row["relative_to_best"]
        assert row["note"].startswith("failed: diverged") and "never ranked" in row["note"]
    assert "in 1 of 3 repeats" in only(summary, framework="chainer")["note"]
    markdown, html = (path.read_text() for path in render(tmp_path))
    ranking = sections(markdown)[RANKING]
    assert "mxnet" not in ranking.split("row(s) not ranked")[0] and "chainer" not in ranking.split("row(s) not ranked")[0]
    assert "2 row(s) not ranked" in ranking
    not_ranked = markdown.split("### Not ranked")[1]
    assert "| mxnet | cuda12 | fp32 |" in not_ranked
    assert "failed: diverged (the training loss after epoch 1 is nan)" in not_ranked
    assert html.count('<figure class="chart">') == 1  # the chart shows the ranked row only
    assert html.count('<figure class="steps">') == 1  # and only the ok row has step times to plot


def test_accuracy_is_judged_against_the_target_in_the_full_profile_on_real_data_only(tmp_path):
    """The target is the gate's accuracy check (FAIRNESS.md: accuracy-targets); on synthetic data
    it does not apply, and no row is flagged for its accuracy there."""
    workload = declaration.get("cnn")
    low = workload.accuracy_target - workload.accuracy_tolerance - 0.01
    write(tmp_path, [training("pytorch", 1000), training("jax", 900, accuracy=low),
                     training("jax", 900, accuracy=low, data="synthetic")])
    summary = summary_of(tmp_path)
    real = only(summary, framework="jax", data="real")
    assert str(real["checks"]["accuracy"]).startswith("failed: below target 77% ± 3%") and not real["ranked"]
    assert only(summary, framework="pytorch")["checks"]["accuracy"].state == "passed"
    synthetic = only(summary, framework="jax", data="synthetic")
    assert synthetic["checks"]["accuracy"].state == "not applicable" and synthetic["ranked"]
    assert synthetic["flags"] == []
    assert "below target 77%" in render(tmp_path)[0].read_text()


def test_rows_from_the_frameworks_own_initialisers_carry_a_note(tmp_path):
    marked_in_extras = training("jax", 900, extras={"init": "framework"})  # the framework's own record
    write(tmp_path, [training("pytorch", 1000, init="framework"), marked_in_extras, training("tensorflow", 800)])
    summary = summary_of(tmp_path)
    for framework in ("pytorch", "jax"):
        row = only(summary, framework=framework)
        assert row["row_name"] == f"{framework} [init=framework]"
        assert any("accuracy not from the same start" in flag for flag in row["flags"])
    assert not only(summary, framework="tensorflow")["flags"]
    markdown = render(tmp_path)[0].read_text()
    assert "init=framework: accuracy not from the same start" in sections(markdown)[RANKING]
    assert "init: framework (each framework's own initialisers" in markdown


def test_rows_of_one_group_with_different_cpu_shares_say_so(tmp_path):
    write(tmp_path, [training("pytorch", 100, device="cpu", cpu_affinity=16),
                     training("jax", 90, device="cpu", cpu_affinity=16, cpu_quota=4.0),
                     training("tensorflow", 1000, cpu_affinity=8), training("mxnet", 900, cpu_affinity=8)])
    summary = summary_of(tmp_path)
    assert only(summary, framework="pytorch")["flags"] == [
        "CPU share differs within this group: CPU affinity 16 CPUs, CPU quota no limit"]
    assert only(summary, framework="jax")["flags"] == [
        "CPU share differs within this group: CPU affinity 16 CPUs, CPU quota 4 CPUs"]
    assert only(summary, framework="tensorflow")["flags"] == [] == only(summary, framework="mxnet")["flags"]


# --- slow steps and traces --------------------------------------------------------------------------------

def test_slow_step_count_leaves_out_the_first_step_and_each_epochs_last():
    # two epochs of ten steps, each ending on the wait for the device
    count, _, median = slow_step_count([0.5] + [0.01] * 8 + [0.3] + [0.01] * 9 + [0.3], [10, 10])
    assert count == 0 and median == pytest.approx(0.01)
    count, slowest, median = slow_step_count([0.5] + [0.01] * 4 + [0.2, 0.3] + [0.01] * 4 + [0.01] * 10, [11, 10])
    assert (count, slowest, median) == (2, 0.3, pytest.approx(0.01))
    # the first step of a later epoch is judged like any other
    assert slow_step_count([0.5] + [0.01] * 9 + [0.4] + [0.01] * 9, [10, 10])[0] == 1
    assert slow_step_count([0.5] + [0.01] * 4 + [0.01 * SLOW_STEP_FACTOR], [6])[0] == 0  # the epoch's last: left out
    assert slow_step_count([0.5, 0.01], [2])[0] == 0  # too few steps to judge
    # a host that only queues GPU work: 0.2 ms steps, one 5 ms pause is not a recompilation
    assert slow_step_count([0.5] + [0.0002] * 10 + [0.005] + [0.0002] * 8 + [0.3], [20])[0] == 0
    assert slow_step_count([], [])[0] == 0


def test_a_step_much_slower_than_the_median_flags_a_suspected_retrace(tmp_path):
    retraced = [0.5] + [0.01] * 8 + [0.4] + [0.01] * 10
    write(tmp_path, [training("tensorflow", 900, steps=retraced, traces={"train_step": 2, "eval_step": 1}),
                     training("pytorch", 1000, steps=[0.5] + [0.01] * 18 + [0.4])])  # the last step waits
    summary = summary_of(tmp_path)
    tensorflow = only(summary, framework="tensorflow")
    assert tensorflow["slow_steps"] == 1
    assert tensorflow["flags"][0] == ("slow steps: 1 step(s) over 10x the median step (slowest 400 ms, median 10 ms); "
                                      "retrace/recompile suspected: a function was traced again")
    assert tensorflow["flags"][1] == "traces: train_step 2x"  # a count of 1 is not shown
    assert only(summary, framework="pytorch")["flags"] == []


@pytest.mark.parametrize("traces, cause", [
    ({"train_step": 1, "eval_step": 1},
     "each compiled function traced once: not a retrace (a stall, or work outside them)"),
    ({}, "no trace count recorded: a recompilation or a stall"),
])
def test_a_slow_step_says_what_the_trace_counts_tell_of_its_cause(tmp_path, traces, cause):
    """FAIRNESS.md, per-step-times: every compiled function traced once rules a retrace out (MindSpore's
    graph-mode GRU stalls on a CPU with each step traced once); an eager row records no count."""
    stalled = [15.3, 0.21, 0.2, 0.34, 0.21, 0.23, 3.79, 1.16]
    write(tmp_path, [training("mindspore", 70, steps=stalled, traces=traces)])
    assert only(summary_of(tmp_path), framework="mindspore")["flags"] == [
        f"slow steps: 1 step(s) over 10x the median step (slowest 3.79e+03 ms, median 220 ms); {cause}"]


def test_inference_batches_are_not_judged_as_training_steps(tmp_path):
    result = measured(Result(Cell("pytorch", "resnet50", variant="cuda12"), metrics=Metrics(images_per_s=900.0),
                             samples=Samples(batch_times_s=[0.03] * 10 + [0.9]),
                             provenance=Provenance(device="cuda", gpu_name=H200)))
    write(tmp_path, [result])
    assert only(summary_of(tmp_path, "resnet50"), framework="pytorch")["flags"] == []


# --- details and metadata ----------------------------------------------------------------------------

def test_details_show_the_fast_paths_and_the_provenance_of_each_row(tmp_path):
    extras = {"optimizer": "tf.raw_ops.ResourceApplyKerasMomentum (fused)", "gru_kernel": "cudnn: CudnnRNNV3",
              "layout": "NHWC <channels_last>", "tf32": "False", "option.xla": "on", "threads": "8",
              "jit_compile": "True"}
    full = training("tensorflow", 1000, workload="gru", options={"xla": "on"}, extras=extras, cpu_affinity=16,
                    cpu_quota=8.0, environment={"OMP_NUM_THREADS": "8", "NVIDIA_TF32_OVERRIDE": "0"},
                    gpu={"name": H200, "memory_total_mib": "143771", "mig_mode": "Disabled"},
                    packages=["numpy==2.1.0", "tensorflow==2.18.0"], packages_sha256="sha256:" + "ab" * 32,
                    image_revision="1234abcd")
    bare = training("jax", 900, workload="gru", extras={"optimizer": ""})
    bare.provenance.extras = {}
    write(tmp_path, [full, bare])
    markdown, html = (path.read_text() for path in render(tmp_path))
    details = markdown.split("### Fast paths and provenance per row")[1]
    for text in ("optimizer: tf.raw\\_ops.ResourceApplyKerasMomentum (fused)", "GRU kernel: cudnn: CudnnRNNV3",
                 "layout: NHWC &lt;channels\\_last&gt;", "TF32: False", "options: xla=on", "threads: 8",
                 "init: canonical", "CPU affinity: 16 CPUs", "CPU quota: 8 CPUs",
                 "environment: NVIDIA\\_TF32\\_OVERRIDE=0, OMP\\_NUM\\_THREADS=8",
                 "GPU: name=NVIDIA H200, memory\\_total\\_mib=143771, mig\\_mode=Disabled",
                 f"packages: sha256:{'ab' * 32} (2 packages)", "image revision: 1234abcd",
                 "other extras: jit\\_compile=True"):
        assert text in details, text
    jax = details.split("**jax · cuda12**")[1]
    assert "optimizer: not recorded" in jax and "GRU kernel: not recorded" in jax and "TF32: not recorded" in jax
    assert "NHWC &lt;channels_last&gt;" in html and "<channels_last>" not in html  # escaped in both pages
    assert "<dt>GRU kernel</dt><dd>cudnn: CudnnRNNV3</dd>" in html


def test_the_recorded_cell_order_is_shown_and_its_absence_is_fine(tmp_path):
    write(tmp_path, [training("pytorch", 1000)])
    assert "Cell order" not in render(tmp_path)[0].read_text()
    order = [f"pytorch__cuda12__cnn__fp32__full__real__r{repeat}" for repeat in range(15)]
    (tmp_path / "run.json").write_text(json.dumps({"invocations": [{"mode": "benchmark", "order": order, "seed": 1234}]}))
    markdown, html = (path.read_text() for path in render(tmp_path))
    line = next(line for line in markdown.splitlines() if line.startswith("- **Cell order:**"))
    assert "shuffled with seed 1234" in line and "15 cells: pytorch\\_\\_cuda12" in line
    assert "(3 more; the full order is in run.json)" in line
    assert "<dt>Cell order</dt>" in html
    (tmp_path / "run.json").write_text(json.dumps({"invocations": [{"order": "not a list", "seed": 7},
                                                                   {"order": [{"framework": "jax", "repeat": 0}]}]}))
    markdown = render(tmp_path)[0].read_text()
    assert "- **Cell order (invocation 2):** 1 cells: jax\\_\\_r0" in markdown
    # a run.json its one reader refuses (run_folder.read_run_record) leaves the order out, not the report
    for refused in ("{not json", json.dumps({"invocations": [{"order": [], "seed": [1]}]})):
        (tmp_path / "run.json").write_text(refused)
        assert "Cell order" not in render(tmp_path)[0].read_text()


def test_a_plain_result_frame_still_summarises(mixed):
    """summarise() takes to_frame's frame too (without the report's own columns): no checks, same ranks."""
    summary = summarise(to_frame(load_cells(mixed).results))["cnn"]
    assert summary["group_label"].nunique() == 4 and (summary["rank"] == 1).sum() == 4


# --- the first screen and the page ------------------------------------------------------------------

def test_the_first_screen_is_the_like_for_like_ranking(mixed):
    write(mixed, [training("mxnet", 0, status="failed", reason="diverged: the loss is nan")])
    markdown, html = (path.read_text() for path in render(mixed))
    # Markdown: the title, the grid, then the ranking: its tables come before the run and the workloads
    assert list(sections(markdown))[:2] == [GRID, RANKING]
    first_table = next(index for index, line in enumerate(sections(markdown)[RANKING].splitlines())
                       if line.startswith("|"))
    assert sections(markdown)[RANKING].splitlines()[first_table].startswith(
        "| # | Framework | Variant | Median steady samples/s |")
    assert markdown.index(GRID) < markdown.index(RANKING) < markdown.index("## This run") < markdown.index("\n## CNN")
    ranking = sections(markdown)[RANKING]
    assert ranking.index("#### GPU NVIDIA A100") < ranking.index("#### GPU NVIDIA H200 · fp32") \
        < ranking.index("#### GPU NVIDIA H200 · fp16") < ranking.index("#### CPU")
    # fastest first in each group
    h200 = ranking.split("#### GPU NVIDIA H200 · fp32")[1].split("####")[0]
    assert h200.index("| 1 | pytorch |") < h200.index("| 2 | jax |")
    # HTML: the grid is the page's first section and first table; then the ranking, before the run's metadata
    body = html.split("<body>", 1)[1]
    assert body.index("<h1>") < body.index('<section id="grids">') < body.index("<table") \
        == body.index('<table class="grid" id="grid-1">') < body.index('<section id="ranking">')
    assert body.index('<section id="ranking">') < body.index("<table>") < body.index('<section id="run">')
    assert body.index("<h1>") < body.index('<section id="ranking">') < body.index("<dl")
    assert body.index('<section id="ranking">') < body.index("<svg")
    # the terminal's first screen is the same ranking, alone
    text = ranking_text(mixed)
    assert text.startswith(f"## {RANKING}") and text.strip() in markdown


class _Structure(HTMLParser):
    """Tags that close in order, ids that are unique, in-page references that resolve."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "area", "base", "col", "embed", "source", "track", "wbr"}

    def __init__(self):
        super().__init__()
        self.stack, self.problems, self.ids, self.references = [], [], collections.Counter(), set()

    def _attributes(self, attributes):
        found = dict(attributes)
        if "id" in found:
            self.ids[found["id"]] += 1
        for name in ("href", "xlink:href"):
            if (found.get(name) or "").startswith("#"):
                self.references.add(found[name][1:])
        for value in found.values():
            self.references.update(re.findall(r"url\(#([^)]+)\)", value or ""))

    def handle_starttag(self, tag, attributes):
        self._attributes(attributes)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attributes):
        self._attributes(attributes)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        else:
            self.problems.append(f"</{tag}> at {self.getpos()} closes {self.stack[-1:]}")


def test_the_page_is_well_formed_with_unique_ids_and_escaped(mixed):
    hostile = training("<b>fw", 999, extras={"layout": "<script>alert(1)</script>"})
    write(mixed, [hostile, training("jax", 700, data="synthetic")])
    html = render(mixed)[1].read_text()
    structure = _Structure()
    structure.feed(html)
    structure.close()
    assert structure.problems == [] and structure.stack == []
    assert [name for name, count in structure.ids.items() if count > 1] == []
    assert structure.references <= set(structure.ids)
    assert html.count('<figure class="chart">') == 5
    assert html.count('<figure class="steps">') == len(re.findall(r"<details>", html))  # each row's step plot
    assert "<script" not in html.lower() and "<b>fw" not in html
    assert "&lt;b&gt;fw" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
