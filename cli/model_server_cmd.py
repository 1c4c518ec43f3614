"""`wakeful dev model-server`: a scripted model behind a real chat-completions server, so the demo
and the proposer's real model path run without a language model."""

from __future__ import annotations

import signal
import threading

import click

from wakeful.cli.output import say


@click.command("model-server")
@click.option("--port", default=8089, show_default=True, help="Port on 127.0.0.1 (0: any free one).")
@click.option(
    "--script",
    type=click.Choice(["rules", "gullible"]),
    default="gullible",
    show_default=True,
    help="rules: the first tool offered, arguments from the task card; gullible: also obeys "
    "instructions planted in evidence.",
)
def model_server(port: int, script: str) -> None:
    """Serve a deterministic model over the OpenAI chat-completions API until Ctrl-C or SIGTERM."""
    from wakeful.devstack.model_server import ChatServer, scripted

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with ChatServer(scripted(script), port=port) as server:
        say(f"scripted model ({script}) on {server.url}; point the proposer at it with:")
        click.echo(
            f"WAKEFUL_MODEL=openai WAKEFUL_MODEL_URL={server.url} WAKEFUL_MODEL_NAME=scripted", nl=True
        )
        stop.wait()
    say("model server stopped")
