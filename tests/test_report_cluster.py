"""The report of a run on a cluster (docs/RAY.md; RUN-GUARANTEES.md, what a Ray node can do): each row's details say which node ran it (the node's
hostname, address and shortened id, from provenance.cluster), the accelerator type and the tries;
the device column keeps the GPU model; the run's metadata lists the nodes. A run on one host shows
none of it.

Results are fabricated with workloads.common.result.Result (as a Ray backend records them) and read
back the way `python -m orchestrator report` does."""
from __future__ import annotations

from orchestrator.report import render, report_frame, summarise
from orchestrator.report.frame import cluster_node
from orchestrator.report.metadata import run_metadata
from orchestrator.results import cell_path, load_cells
from workloads.common.result import Cell, Metrics, Provenance, Result
from support.records import measured

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
NODE_A, NODE_B = "a1" * 28, "b2" * 28  # Ray's node ids: 56 hex digits


def cell_result(framework: str, rate: float, *, gpu: str, node_id: str | None, hostname: str = "",
                address: str = "", accelerator: str = "", tries: str | None = "1", repeat: int = 0) -> Result:
    cluster = {}
    if node_id is not None:
        cluster = {"node_id": node_id, "node_address": address, "hostname": hostname,
                   "accelerator_type": accelerator, "ray_version": "2.60.0"}
        if tries is not None:
            cluster["tries"] = tries
    steps = [0.5] + [0.01] * 19
    return measured(Result(
        cell=Cell(framework, "cnn", variant="cuda12", precision="fp32", profile="full", data="real", repeat=repeat),
        metrics=Metrics(train_time_s=sum(steps), samples_per_s=1000.0, steady_samples_per_s=rate,
                        test_accuracy=0.77, parameter_count=3_441_592),
        provenance=Provenance(framework_version="1.0", device="cuda", gpu_name=gpu, hostname="c0ffee123456",
                              backend="ray/docker" if cluster else "docker", cluster=cluster,
                              extras={"optimizer": "SGD", "layout": "NCHW", "tf32": "off"})))


def write(folder, results) -> None:
    for result in results:
        result.write(cell_path(folder, result.cell))


def details_section(markdown: str) -> str:
    return markdown.split("### Fast paths and provenance per row")[1]


def test_each_row_says_which_node_and_gpu_model_produced_it(tmp_path):
    write(tmp_path, [
        cell_result("pytorch", 1000, gpu=H100, node_id=NODE_A, hostname="gpu-1", address="10.0.0.11",
                    accelerator="H100"),
        cell_result("jax", 900, gpu=H100, node_id=NODE_B, hostname="gpu-2", address="10.0.0.12",
                    accelerator="H100", tries="2"),
    ])
    markdown, html = (path.read_text() for path in render(tmp_path))
    details = details_section(markdown)
    pytorch = details.split("**pytorch · cuda12**")[1].split("**jax · cuda12**")[0]
    jax = details.split("**jax · cuda12**")[1]
    assert f"node: gpu-1 (10.0.0.11, node {NODE_A[:8]})" in pytorch and "tries: 1" in pytorch
    assert f"node: gpu-2 (10.0.0.12, node {NODE_B[:8]})" in jax and "tries: 2" in jax
    assert "accelerator type: H100" in pytorch
    assert NODE_A not in markdown and NODE_A not in html  # shortened
    assert f"<dt>node</dt><dd>gpu-2 (10.0.0.12, node {NODE_B[:8]})</dd>" in html
    # the device column still names the GPU model; the metadata lists the nodes
    assert f"cuda ({H100})" in markdown
    nodes = markdown.split("**Cluster nodes:**")[1].split("\n")[0]
    assert f"gpu-1 (10.0.0.11, node {NODE_A[:8]})" in nodes and f"gpu-2 (10.0.0.12, node {NODE_B[:8]})" in nodes


def test_repeats_on_different_nodes_name_both_in_their_row(tmp_path):
    write(tmp_path, [
        cell_result("pytorch", 1000, gpu=A100, node_id=NODE_A, hostname="gpu-1", address="10.0.0.11", repeat=0),
        cell_result("pytorch", 1010, gpu=A100, node_id=NODE_B, hostname="gpu-2", address="10.0.0.12", repeat=1),
    ])
    summary = summarise(report_frame(load_cells(tmp_path).results))["cnn"]
    assert len(summary) == 1
    assert summary.iloc[0]["details"]["node"] == \
        f"gpu-1 (10.0.0.11, node {NODE_A[:8]}) | gpu-2 (10.0.0.12, node {NODE_B[:8]})"


def test_partial_cluster_records_still_name_the_node():
    assert cluster_node(cell_result("pytorch", 1, gpu=H100, node_id=NODE_A)) == f"node {NODE_A[:8]}"
    assert cluster_node(cell_result("pytorch", 1, gpu=H100, node_id="", address="10.0.0.11")) == "10.0.0.11"
    assert cluster_node(cell_result("pytorch", 1, gpu=H100, node_id="", hostname="gpu-1",
                                    address="gpu-1")) == "gpu-1"
    no_tries = report_frame([cell_result("pytorch", 1, gpu=H100, node_id=NODE_A, hostname="gpu-1", tries=None)])
    assert "tries" not in no_tries["details"].iloc[0] and "node" in no_tries["details"].iloc[0]


def test_a_run_on_one_host_shows_no_node(tmp_path):
    write(tmp_path, [cell_result("pytorch", 1000, gpu=H100, node_id=None)])
    frame = report_frame(load_cells(tmp_path).results)
    assert frame["cluster_node"].isna().all()
    assert "node" not in frame["details"].iloc[0] and "tries" not in frame["details"].iloc[0]
    assert "Cluster nodes" not in dict(run_metadata(frame))
    assert "Cluster nodes" not in render(tmp_path)[0].read_text()
