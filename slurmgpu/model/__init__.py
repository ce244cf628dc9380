"""The model: plain, frozen dataclasses with no I/O. Everything downstream reads only these."""
