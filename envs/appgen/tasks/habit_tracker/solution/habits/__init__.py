"""Habit tracker."""
