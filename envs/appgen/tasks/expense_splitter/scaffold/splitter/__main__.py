raise SystemExit("splitter: not written yet (see the specification)")
