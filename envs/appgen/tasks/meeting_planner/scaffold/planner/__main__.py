raise SystemExit("planner: not written yet (see the specification)")
