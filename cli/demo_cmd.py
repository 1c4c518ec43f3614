"""`wakeful demo`: the main job, told step by step (the story itself is cli/demo.py)."""

from __future__ import annotations

import sys

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import say
from wakeful.core.settings import Settings


@click.command("demo")
@app_option
@click.pass_obj
def demo(settings: Settings) -> None:
    """The main job: start the stack and workers if needed, then tell the whole story; exit 1 if a
    step does not behave as told."""
    from wakeful.cli.demo import Demo

    runner = Demo(settings, say)
    if not runner.run():
        say(f"demo FAILED at: {', '.join(runner.failures)}")
        sys.exit(1)
    click.echo("demo ok: every step behaved as told")
