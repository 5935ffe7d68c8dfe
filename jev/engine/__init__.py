"""Running the model: the one-pass decision runner and its checkpoint folder."""
