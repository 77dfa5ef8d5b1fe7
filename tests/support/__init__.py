"""What the tests share and are not tests themselves: stand-in records and interpreters (records),
hostile inputs (hostile), the numpy definitions parity is held to (numpy_reference), running cells
and snippets in a framework's real environment (framework_cells, compiled_step_checks,
fairness_probes), stand-in packages (stand_ins) and the headless browser (browser)."""
