"""Dead letters on wakeful.dlq: read them, say which a bulk replay takes, and replay them."""
