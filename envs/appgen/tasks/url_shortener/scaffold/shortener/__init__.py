"""shortener: a URL shortening service over HTTP with SQLite storage (see spec.md)."""
