"""The version of fi-compat itself (not of FlashInfer)."""

__version__ = "0.2.0"
