"""The `parbench` commands, one module each; `parbench.cli` wires their arguments."""
