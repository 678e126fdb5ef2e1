raise SystemExit("weatherboard: not written yet (see the specification)")
