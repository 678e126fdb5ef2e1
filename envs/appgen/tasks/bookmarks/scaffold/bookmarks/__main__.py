raise SystemExit("bookmarks: not written yet (see the specification)")
