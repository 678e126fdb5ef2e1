raise SystemExit("converter: not written yet (see the specification)")
