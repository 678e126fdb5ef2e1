"""Polls web app."""
