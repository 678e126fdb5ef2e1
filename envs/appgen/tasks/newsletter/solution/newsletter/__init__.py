"""Newsletter."""
