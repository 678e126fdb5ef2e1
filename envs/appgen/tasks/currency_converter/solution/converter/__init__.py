"""Currency converter."""
