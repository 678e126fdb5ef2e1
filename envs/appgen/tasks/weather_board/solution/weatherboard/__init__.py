"""Weather board."""
