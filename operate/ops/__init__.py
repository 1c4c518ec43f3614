"""The ops page (`wakeful ops`): one HTTP server, its sessions and its views."""
