"""Outfit planner."""
