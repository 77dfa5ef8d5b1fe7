"""Result storage on the host: paths, loading (and refusing) JSON files, flattening to pandas."""
from __future__ import annotations

import dataclasses
import json

import pytest

from orchestrator.errors import UserError
from orchestrator.results import cell_path, load_reference, load_results, to_frame
from workloads.common import declaration
from workloads.common.result import Cell, Metrics, Provenance, Result, Samples
from support.records import measured


def make_result(framework="pytorch", workload="cnn", *, precision="fp32", repeat=0,
                status="ok", reason=None, train_time_s=12.0) -> Result:
    return measured(Result(
        cell=Cell(framework=framework, workload=workload, variant="cuda12", precision=precision,
                  profile="full", data="real", repeat=repeat),
        status=status,
        reason=reason,
        started_at="2026-12-02T10:00:00+00:00",
        phases={"train": train_time_s} if status == "ok" else {},
        metrics=Metrics(train_time_s=train_time_s, samples_per_s=50_000 / train_time_s,
                        test_accuracy=0.771, parameter_count=3_441_592) if status == "ok" else Metrics(),
        samples=Samples(first_step_s=0.5, epoch_times_s=[train_time_s / 2] * 2, epoch_steps=[781, 781]),
        settings={"batch_size": 64},
        provenance=Provenance(framework_version="2.13.0", device="cuda", gpu_name="NVIDIA H200",
                              cuda_version="12.8", backend="docker", git_revision="abc1234",
                              image_digest="sha256:0123"),
        wall_time_s=train_time_s + 5,
    ))


def write_all(results_dir, results):
    for result in results:
        result.write(cell_path(results_dir, result.cell))


def test_cell_path_uses_the_cell_key(tmp_path):
    cell = Cell(framework="pytorch", workload="gru", repeat=2)
    assert cell_path(tmp_path, cell) == tmp_path / "cells" / f"{cell.key}.json"


def test_round_trip_preserves_every_field(tmp_path):
    originals = [make_result(repeat=0), make_result("tensorflow", repeat=1, train_time_s=24.0),
                 make_result(precision="fp16", status="unsupported", reason="fp16 needs a CUDA GPU")]
    write_all(tmp_path, originals)
    loaded = load_results(tmp_path)
    by_key = {result.cell.key: result for result in loaded}
    assert len(loaded) == len(originals)
    for original in originals:
        assert by_key[original.cell.key] == original
    # sorted by file name, so reports are stable from run to run
    assert [r.cell.key for r in loaded] == sorted(r.cell.key for r in originals)


@pytest.mark.parametrize("missing", [False, True])
def test_no_results_names_the_command_to_run(tmp_path, missing):
    if not missing:
        (tmp_path / "cells").mkdir()
    with pytest.raises(UserError, match="run-matrix"):
        load_results(tmp_path)


def test_unknown_schema_version_is_refused_naming_the_file(tmp_path):
    result = make_result()
    path = cell_path(tmp_path, result.cell)
    result.write(path)
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        load_results(tmp_path)
    message = str(caught.value)
    assert path.name in message and "99" in message and "re-run" in message
    assert "\n" not in message


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": 1, "cell": {"framework": "x"}}',
                                     '{"schema_version": 1, "cell": {"framework": "x", "workload": "cnn"}, "metrics": 5}',
                                     '{"schema_version": 1, "cell": {"framework": "x", "workload": "cnn"}, "status": "great"}',
                                     '[1, 2]'])
def test_malformed_file_is_refused_with_a_fix(tmp_path, content):
    (tmp_path / "cells").mkdir()
    path = tmp_path / "cells" / "broken.json"
    path.write_text(content)
    with pytest.raises(UserError) as caught:
        load_results(tmp_path)
    assert "broken.json" in str(caught.value)
    assert "re-run" in str(caught.value)


def test_to_frame_flattens_one_row_per_result(tmp_path):
    results = [make_result(repeat=r, train_time_s=t) for r, t in enumerate([10.0, 12.0, 14.0])]
    results.append(make_result(precision="fp16", status="unsupported", reason="fp16 needs a CUDA GPU"))
    frame = to_frame(results)
    expected = {"framework", "variant", "workload", "precision", "profile", "data", "repeat", "status",
                "reason", "device", "gpu_name", "framework_version", "cuda_version", "backend",
                "image_digest", "git_revision", "started_at", "wall_time_s"}
    expected |= {item.name for item in dataclasses.fields(Metrics)}
    assert expected <= set(frame.columns)
    assert len(frame) == 4
    assert frame["train_time_s"].tolist()[:3] == [10.0, 12.0, 14.0]
    assert frame["train_time_s"].isna().tolist()[3]
    assert frame.loc[3, "reason"] == "fp16 needs a CUDA GPU"
    assert frame.loc[0, "gpu_name"] == "NVIDIA H200"
    assert frame["seconds_per_1000_images"].dtype == "float64"  # all-None columns stay numeric


def test_to_frame_of_nothing_has_the_columns():
    frame = to_frame([])
    assert frame.empty and "train_time_s" in frame.columns and "framework" in frame.columns


def test_reference_numbers_are_found_from_the_package():
    reference = load_reference()
    assert set(reference["workload"]) <= set(declaration.declared())
    pytorch_cnn = reference[(reference["workload"] == "cnn") & (reference["framework"] == "pytorch")]
    assert dict(zip(pytorch_cnn["gpu"], pytorch_cnn["value"])) == {"K80": 169, "P100": 51}


def test_unreadable_reference_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="missing.csv"):
        load_reference(tmp_path / "missing.csv")


# --- training results of schema 2, and schema 1 results ------------------------------------------

def training_result(**samples) -> Result:
    """A schema-2 training result as the harness writes it: per-step times, the first loss, trace
    counts, and an epoch whose loss was not a finite number (null)."""
    result = make_result("jax", "gru")
    result.cell.options = {}
    result.samples = Samples(first_step_s=2.5, epoch_times_s=[3.0, 1.0], epoch_steps=[3, 3],
                             epoch_losses=[0.69, None], batch_times_s=[2.5, 0.25, 0.25, 0.34, 0.33, 0.33],
                             first_loss=0.7, traces={"train_step": 1, "eval_step": 1}, **samples)
    result.metrics.steady_samples_per_s = 320.0
    return result


def test_a_training_result_with_steps_first_loss_traces_and_null_losses_loads_and_is_valid(tmp_path):
    from orchestrator.results import invalid_measurement, read_cell_file

    result = training_result()
    path = cell_path(tmp_path, result.cell)
    result.write(path)
    assert json.loads(path.read_text())["samples"]["epoch_losses"] == [0.69, None]  # null, never NaN
    loaded = read_cell_file(path)
    assert loaded == result and invalid_measurement(loaded) is None
    frame = to_frame([loaded])
    assert frame.loc[0, "status"] == "ok" and frame.loc[0, "steady_samples_per_s"] == 320.0


@pytest.mark.parametrize("samples, named", [
    ({"batch_times_s": [0.25, -0.1]}, "samples.batch_times_s[1] is -0.1"),
    ({"batch_times_s": [0.25, float("inf")]}, None),  # written as null: a type error on reading, below
    ({"traces": {"train_step": -1}}, "samples.traces.train_step is -1"),
])
def test_a_negative_step_time_or_trace_count_is_invalid(tmp_path, samples, named):
    from orchestrator.results import INVALID, invalid_measurement, load_cells

    result = training_result()
    for name, value in samples.items():
        setattr(result.samples, name, value)
    if named:
        assert named in invalid_measurement(result)
        assert to_frame([result]).loc[0, "status"] == INVALID
    else:  # NaN/inf never reach the file: null, which a list of step times cannot hold
        result.write(cell_path(tmp_path, result.cell))
        make_result().write(cell_path(tmp_path, make_result().cell))
        loaded = load_cells(tmp_path)
        assert len(loaded.results) == 1 and "batch_times_s[1] must be a number, not null" in loaded.unreadable[0].reason


def test_a_schema_1_result_still_loads(tmp_path):
    from orchestrator.results import read_cell_file

    record = make_result().to_dict()
    record["schema_version"] = 1
    for name in ("init", "options"):
        del record["cell"][name]
    for name in ("batch_times_s", "first_loss", "traces"):
        del record["samples"][name]
    for name in ("image_revision", "image_sources_sha256", "cpu_affinity", "cpu_quota", "environment", "gpu",
                 "packages", "packages_sha256"):
        del record["provenance"][name]
    (tmp_path / "cells").mkdir()
    path = tmp_path / "cells" / "old.json"
    path.write_text(json.dumps(record))
    loaded = read_cell_file(path)
    assert loaded.schema_version == 1 and loaded.cell.init == "canonical" and loaded.cell.options == {}
    assert loaded.samples.batch_times_s == [] and loaded.samples.traces == {}
    record["samples"]["epoch_times_s"] = ["fast"]  # version 1 is checked field by field too
    path.write_text(json.dumps(record))
    with pytest.raises(Exception, match="epoch_times_s\\[0\\] must be a number, not a string"):
        read_cell_file(path)


def test_the_frame_carries_init_and_options():
    plain = make_result()
    tuned = make_result("tensorflow")
    tuned.cell.init, tuned.cell.options = "framework", {"xla": "on"}
    frame = to_frame([plain, tuned])
    assert frame["init"].tolist() == ["canonical", "framework"]
    assert frame["options"].tolist() == ["", "xla=on"]
