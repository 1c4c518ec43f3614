"""Every benchmark and load generator: the apps' traffic, `wakeful bench`, `chaos` and its drills."""
