"""Authority: who may do what, written by operators and read live at every wake."""
