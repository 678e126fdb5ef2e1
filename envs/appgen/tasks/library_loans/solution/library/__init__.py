"""Library loans."""
