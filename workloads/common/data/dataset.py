"""What a loader returns, and where datasets are kept."""
import os
import pathlib
from dataclasses import dataclass  # novermin (Python 3.6 images install the dataclasses backport)
from typing import Optional

import numpy as np


@dataclass
class Dataset:
    """Train and test arrays, and where they came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str  # "real" or "synthetic"
    checksum: Optional[str] = None  # "md5:<hex>" / "sha256:<hex>" of the archive for real data


def default_data_dir() -> pathlib.Path:
    """``$ROSETTA_DATA_DIR`` if set, else ``~/.cache/rosetta-bench/data``."""
    configured = os.environ.get("ROSETTA_DATA_DIR")
    if configured:
        return pathlib.Path(configured).expanduser()
    return pathlib.Path.home() / ".cache" / "rosetta-bench" / "data"
