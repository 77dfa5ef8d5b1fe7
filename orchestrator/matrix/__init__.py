"""The benchmark matrix: load and validate `matrix.toml`, apply command-line narrowing, expand cells.

Every unknown key or name, every value of the wrong TOML type and every name given twice is
refused with one line that names the file, the key and what is expected.

Cells are expanded repeat-major (every cell once before any second repeat), and `run_order`
shuffles them within each repeat in an order drawn from a seed that the run records, so that
neither slow drift of the machine (heat, neighbours) nor a fixed position in the run favours one
framework.

    checks.py   a value's type, name or range checked, and quoted in one line
    model.py    Matrix and FrameworkEntry, narrowing, the cells and their seeded order
    reading.py  load and parse matrix.toml
"""
from orchestrator.matrix.checks import MAX_REPEAT, check_names, check_repeat  # noqa: F401 (the package's names)
from orchestrator.matrix.model import (DEFAULT_REPEATS, MAX_OPTION_COMBINATIONS, FrameworkEntry, Matrix,  # noqa: F401
                                       narrow, new_seed, parse_option_arguments, run_order)
from orchestrator.matrix.reading import DEFAULT_MATRIX, LONGEST_MATRIX_FILE, load, parse  # noqa: F401
