"""csvreport: group a CSV file and report metrics per group (see spec.md)."""
