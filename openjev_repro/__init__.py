"""openjev-repro: rebuild, rerun and verify GPU serving-latency studies of Open-Jev models."""

__version__ = "0.1.0"
__all__ = ["__version__"]
