"""Published multi-GPU training tables: as data or described in files, and predicted."""
