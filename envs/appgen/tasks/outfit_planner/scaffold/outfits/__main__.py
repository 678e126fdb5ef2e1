raise SystemExit("outfits: not written yet (see the specification)")
