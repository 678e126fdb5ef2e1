"""Expense splitter."""
