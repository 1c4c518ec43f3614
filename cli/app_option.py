"""`--app module:attribute`: the one option every command that runs or drives roles shares.

The app is loaded at once, while the command line is parsed, so a bad value stops the command in one
line before anything starts or is sent. Then it is named twice: in this process's Settings, and in
$WAKEFUL_APP, which every role process, bench and chaos worker started from here inherits.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

import click

from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.sdk.app import DEFAULT_APP, ENV, App, load_app

F = TypeVar("F", bound=Callable[..., object])
OPTION = "--app"


def checked_app(spec: str | None, setting: str = OPTION) -> App:
    """The app `spec` names (None: $WAKEFUL_APP, else the bundled one), or a ConfigError naming
    `setting`: one line, whatever went wrong while importing it."""
    try:
        return load_app(spec)
    except ConfigError as exc:
        problem = str(exc).removeprefix(f"{exc.setting}: ")
        raise ConfigError(setting if exc.setting == ENV else f"{setting} ({exc.setting})", problem) from exc
    except Exception as exc:  # the app's own module failed to import: say so, not a traceback
        raise ConfigError(setting, f"importing {spec!r} failed: {type(exc).__name__}: {exc}") from exc


def _use_app(ctx: click.Context, _param: click.Parameter, spec: str | None) -> None:
    settings = ctx.find_object(Settings)
    assert settings is not None, "the root command builds the Settings"
    if spec is None:  # the app the environment names: checked as early, with what to fix
        checked_app(settings.app, ENV if settings.app else OPTION)
        return
    checked_app(spec)
    os.environ[ENV] = spec  # role processes, bench and chaos workers started from here inherit it
    ctx.obj = dataclasses.replace(settings, app=spec)


def app_option(command: F) -> F:
    """Add `--app` to a command (put it under the command's `@click.command`)."""
    return click.option(
        OPTION,
        "app_spec",
        metavar="MODULE:ATTR",
        default=None,
        expose_value=False,
        callback=_use_app,
        help=f"The app to drive (default: ${ENV}, else the bundled example app, {DEFAULT_APP}).",
    )(command)
