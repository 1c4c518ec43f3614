"""The timer role: deadlines and the sweep that leaves no open task without a wake."""
