"""Bookmarks."""
