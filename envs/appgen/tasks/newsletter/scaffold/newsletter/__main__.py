raise SystemExit("newsletter: not written yet (see the specification)")
