"""The `parbench` commands, one module each; `parser.py` wires their arguments."""
