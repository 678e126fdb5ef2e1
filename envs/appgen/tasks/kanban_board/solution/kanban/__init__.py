"""Kanban board."""
