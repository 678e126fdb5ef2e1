"""mdconv: convert a Markdown subset to HTML (see spec.md)."""
