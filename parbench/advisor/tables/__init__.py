"""Published training tables described in files and predicted from their setups alone."""
