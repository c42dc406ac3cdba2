"""Steps on a GPU that is not here, carried from steps measured on another: PREDICTED."""
