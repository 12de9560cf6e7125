"""CLI package for qr-sampler.

Provides the ``qr-sampler`` command-line interface for validating stack
configurations, generating Docker Compose files, and listing available
profiles.

Requires the ``[cli]`` optional extra: ``pip install qr-sampler[cli]``.
"""
