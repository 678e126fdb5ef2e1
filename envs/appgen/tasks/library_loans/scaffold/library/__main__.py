raise SystemExit("library: not written yet (see the specification)")
