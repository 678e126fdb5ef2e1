"""Guestbook web app."""
