"""The inbound role: gate 1 at the door for events read from wakeful.events."""
