"""Rosetta Bench host side: matrix, backends, results and reports. Never imports a framework."""

__version__ = "0.1.0"
