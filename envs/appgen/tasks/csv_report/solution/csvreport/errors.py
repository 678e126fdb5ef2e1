"""Errors raised by csvreport."""


class ReportError(Exception):
    """Bad input: malformed file, unknown column or metric, non-numeric value."""
