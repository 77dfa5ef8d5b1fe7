"""The versioned result record: round trip, refusal of unknown versions, the committed JSON Schema."""
import json
from pathlib import Path

import jsonschema
import pytest

from workloads.common.result import SCHEMA_VERSION, Cell, Result, SchemaError, json_schema

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema" / "result.schema.json"


def sample_result() -> Result:
    result = Result(cell=Cell("pytorch", "cnn", precision="bf16", profile="smoke", data="synthetic", repeat=2))
    result.phases.update(framework_import=1.2, data_load=0.1, train=3.5)
    result.samples.epoch_times_s.append(3.5)
    result.samples.epoch_steps.append(8)
    result.metrics.train_time_s = 3.5
    result.metrics.test_accuracy = 0.25
    result.provenance.framework_version = "2.13.0"
    result.provenance.extras["layout"] = "NCHW"
    result.settings["batch_size"] = 64
    return result


def test_round_trip(tmp_path):
    original = sample_result()
    original.write(tmp_path / "r.json")
    assert Result.read(tmp_path / "r.json") == original
    assert not list(tmp_path.glob(".*.tmp")), "atomic write leaves no temporary file"


def test_unknown_schema_version_is_refused(tmp_path):
    data = sample_result().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(SchemaError, match=f"schema_version {SCHEMA_VERSION + 1} is not supported"):
        Result.read(tmp_path / "r.json")


def test_unknown_field_and_bad_json_are_refused(tmp_path):
    data = sample_result().to_dict()
    data["metrics"]["speed"] = 1
    with pytest.raises(SchemaError, match="unknown field"):
        Result.from_dict(data)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SchemaError, match="not valid JSON"):
        Result.read(tmp_path / "bad.json")


def test_committed_schema_is_generated_from_the_code():
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema(), (
        "regenerate with: python -m workloads.common.result > schema/result.schema.json")


def test_records_validate_against_the_schema():
    jsonschema.validate(sample_result().to_dict(), json_schema())
    bad = sample_result().to_dict()
    bad["status"] = "great"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())
