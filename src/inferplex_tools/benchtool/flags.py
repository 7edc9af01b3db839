"""Flags shared by the commands that start servers of their own (``inferplex bench
--model-repository``, ``inferplex tune``)."""

from __future__ import annotations

import click

from inferplex_tools.benchtool.launch import Ports, parse_ports


def _ports(ctx: click.Context, param: click.Parameter, value: str | None) -> Ports | None:
    if value is None:
        return None
    try:
        return parse_ports(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


#: ``--ports HTTP,GRPC,METRICS``: fixed loopback ports for each server the command starts
#: (they run one after another, so one set serves them all); free ones by default
ports_option = click.option(
    "--ports",
    callback=_ports,
    metavar="HTTP,GRPC,METRICS",
    help="Fixed loopback ports for the server(s) it starts, one at a time (default: free ones).",
)
