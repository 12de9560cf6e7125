"""Allow running ``python -m qr_sampler`` as a CLI entry point."""

from qr_sampler.cli.main import cli

cli()
