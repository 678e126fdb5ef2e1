raise SystemExit("habits: not written yet (see the specification)")
