"""Upstream launchers: small programs of ours that run inside an upstream environment (not the LoRA adapter).

Kept free of this package's heavy imports (pydantic, rich, ...) so that the upstream
environment needs only this directory on PYTHONPATH.
"""

__all__: list[str] = []
