"""Meeting planner."""
